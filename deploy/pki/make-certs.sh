#!/bin/sh
# make-certs.sh DIR [NAME...]: a small certificate authority for sett's
# mutual TLS, written to DIR (made if missing; existing files are kept,
# so running it again issues nothing new):
#   ca.crt, ca.key          the CA (--trusted-ca-file, and the clients' CA)
#   server.crt, server.key  sett's serving certificate (--cert-file,
#                           --key-file), valid for 127.0.0.1, localhost
#                           and each NAME (a DNS name, or an IPv4 address)
#   client.crt, client.key  the client certificate kube-apiserver or k3s
#                           presents (CN kube-apiserver-etcd-client, as
#                           kubeadm names it)
# Keys are P-256, mode 0600. For production, use your own PKI; this is for
# the recipes in docs/DEPLOY.md and their tests.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 DIR [NAME...]" >&2; exit 2; }
dir=$1
shift
mkdir -p "$dir"
cd "$dir"
umask 077

sans="IP:127.0.0.1,DNS:localhost"
for n in "$@"; do
	case $n in
	*[!0-9.]*) sans="$sans,DNS:$n" ;;
	*) sans="$sans,IP:$n" ;;
	esac
done

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [ ! -f ca.crt ]; then
	key ca.key
	openssl req -x509 -new -key ca.key -out ca.crt -days 3650 -subj /CN=sett-ca \
		-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
fi

# issue NAME CN EXTENSIONS
issue() {
	[ -f "$1.crt" ] && return 0
	key "$1.key"
	printf '%s\n' "$3" >"$1.ext"
	openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
	openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 \
		-extfile "$1.ext" -out "$1.crt" 2>/dev/null
	rm -f "$1.csr" "$1.ext"
}
issue server sett "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=$sans"
issue client kube-apiserver-etcd-client "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
chmod 0644 ca.crt server.crt client.crt
