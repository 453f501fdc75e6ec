#!/bin/sh
# setup-ca.sh OUTDIR [DAYS]
#
# Creates the certificates that pmem-csi's controller (registry) and node
# controllers use for mutual TLS, with nothing but openssl:
#
#   OUTDIR/ca.crt, OUTDIR/ca.key                        CA, CN "pmem-ca"
#   OUTDIR/pmem-registry.crt, pmem-registry.key         CN and SAN DNS "pmem-registry"
#   OUTDIR/pmem-node-controller.crt, .key               CN and SAN DNS "pmem-node-controller"
#
# All keys are ECDSA P-256 (PKCS#8 PEM), mode 0600. The leaf certificates carry
# extendedKeyUsage serverAuth,clientAuth, so each one works on both ends of a
# connection.
#
# Idempotent: an existing CA (ca.crt + ca.key) is kept, so running the script
# again only renews the leaf certificates (new keys, new certificates) under the
# same CA, and peers that trust ca.crt keep working.
#
# DAYS (default 365) is the validity of the leaf certificates. A new CA is
# valid for CA_DAYS days (environment, default 3650).
set -eu

prog=setup-ca
usage() {
	echo "usage: $0 OUTDIR [DAYS]" >&2
	exit 2
}

if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
outdir=$1
days=${2:-365}
ca_days=${CA_DAYS:-3650}

case $days in '' | *[!0-9]* | 0*) echo "$prog: DAYS must be a positive integer, got '$days'" >&2; exit 2 ;; esac
case $ca_days in '' | *[!0-9]* | 0*) echo "$prog: CA_DAYS must be a positive integer, got '$ca_days'" >&2; exit 2 ;; esac

command -v openssl >/dev/null 2>&1 || { echo "$prog: openssl not found in PATH" >&2; exit 1; }

mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)

# Everything created from here on is private to the owner unless chmod'ed.
umask 077
work=$(mktemp -d "$outdir/.setup-ca.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# run CMD...: runs an openssl command quietly; on failure shows its output and stops.
run() {
	if ! "$@" >"$work/out" 2>&1; then
		echo "$prog: failed: $*" >&2
		cat "$work/out" >&2
		exit 1
	fi
}

newkey() {
	run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"
}

serial() {
	# 127 random bits, positive, non-zero.
	echo "0x$(openssl rand -hex 16 | sed 's/^./7/')"
}

pubkey() {
	# Public key of a certificate (-c) or a private key (-k), in PEM.
	if [ "$1" = -c ]; then
		openssl x509 -in "$2" -noout -pubkey
	else
		openssl pkey -in "$2" -pubout
	fi
}

# --- CA -------------------------------------------------------------------
ca_crt=$outdir/ca.crt
ca_key=$outdir/ca.key
if [ -e "$ca_crt" ] && [ -e "$ca_key" ]; then
	if [ "$(pubkey -c "$ca_crt")" != "$(pubkey -k "$ca_key")" ]; then
		echo "$prog: $ca_key does not belong to $ca_crt; remove both to create a new CA" >&2
		exit 1
	fi
	chmod 600 "$ca_key"
	echo "$prog: kept existing CA $ca_crt ($(openssl x509 -in "$ca_crt" -noout -subject), $(openssl x509 -in "$ca_crt" -noout -enddate))"
elif [ -e "$ca_crt" ] || [ -e "$ca_key" ]; then
	echo "$prog: only one of $ca_crt and $ca_key exists; restore the other or remove it to create a new CA" >&2
	exit 1
else
	newkey "$work/ca.key"
	cat >"$work/ca.cnf" <<-EOF
		[req]
		prompt = no
		distinguished_name = dn
		x509_extensions = v3_ca
		[dn]
		CN = pmem-ca
		[v3_ca]
		basicConstraints = critical, CA:TRUE
		keyUsage = critical, keyCertSign, cRLSign
		subjectKeyIdentifier = hash
		authorityKeyIdentifier = keyid:always
	EOF
	run openssl req -new -x509 -sha256 -config "$work/ca.cnf" -key "$work/ca.key" \
		-days "$ca_days" -set_serial "$(serial)" -out "$work/ca.crt"
	chmod 644 "$work/ca.crt"
	chmod 600 "$work/ca.key"
	mv "$work/ca.key" "$ca_key"
	mv "$work/ca.crt" "$ca_crt"
	echo "$prog: created CA $ca_crt and $ca_key (CN pmem-ca, valid $ca_days days)"
fi

# --- leaves ---------------------------------------------------------------
for name in pmem-registry pmem-node-controller; do
	newkey "$work/$name.key"
	printf '[req]\nprompt = no\ndistinguished_name = dn\n[dn]\nCN = %s\n' "$name" >"$work/$name.cnf"
	run openssl req -new -sha256 -config "$work/$name.cnf" -key "$work/$name.key" \
		-out "$work/$name.csr"
	cat >"$work/$name.ext" <<-EOF
		basicConstraints = critical, CA:FALSE
		keyUsage = critical, digitalSignature
		extendedKeyUsage = serverAuth, clientAuth
		subjectAltName = DNS:$name
		subjectKeyIdentifier = hash
		authorityKeyIdentifier = keyid, issuer
	EOF
	run openssl x509 -req -sha256 -in "$work/$name.csr" -CA "$ca_crt" -CAkey "$ca_key" \
		-set_serial "$(serial)" -days "$days" -extfile "$work/$name.ext" \
		-out "$work/$name.crt"
	run openssl verify -CAfile "$ca_crt" -purpose sslserver "$work/$name.crt"
	run openssl verify -CAfile "$ca_crt" -purpose sslclient "$work/$name.crt"
	chmod 644 "$work/$name.crt"
	chmod 600 "$work/$name.key"
	mv "$work/$name.key" "$outdir/$name.key"
	mv "$work/$name.crt" "$outdir/$name.crt"
	echo "$prog: created $outdir/$name.crt and $outdir/$name.key (CN and SAN DNS $name, ECDSA P-256, valid $days days)"
done
