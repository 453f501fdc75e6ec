#!/bin/sh
# setup-ca.sh [OPTIONS] OUTDIR [DAYS]
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
#
# A node's own certificate (central mode outside Kubernetes, where each
# machine gets its own key file; in Kubernetes nodes prove their name with
# their pod's ServiceAccount token instead):
#   --node NAME      issue OUTDIR/NAME.crt and NAME.key with CN NAME (the node
#                    name, -nodeid) and SAN DNS "pmem-node-controller" (the
#                    nodes' name every registry checks): the controller takes
#                    its registrations for node NAME only
#
# Options, for other names under the same CA (a renamed Service, the
# scheduler extender's serving certificate, tests):
#   --leaf NAME      issue OUTDIR/NAME.crt and NAME.key instead of the two above
#   --cn CN          its common name (default NAME)
#   --org O          its organisation (O=), e.g. a Kubernetes group
#   --san SAN        a subjectAltName, DNS:name or IP:address (a bare name is
#                    DNS:); may repeat; default DNS:CN; "--san none" for none
#   --usage LIST     extendedKeyUsage (default serverAuth,clientAuth; none)
#   --key-usage LIST keyUsage (default digitalSignature; none)
#   --key ALG        key of the leaf: ec-p256 (default), ec-p384, ec-p521,
#                    rsa-2048, rsa-3072, rsa-4096
#   --ca-cn CN       common name of a new CA (default pmem-ca)
#   --ca-key ALG     key of a new CA (default ec-p256)
set -eu

prog=setup-ca
usage() {
	echo "usage: $0 [--node NAME | --leaf NAME [--cn CN] [--org O] [--san SAN]... [--usage LIST]" >&2
	echo "       [--key-usage LIST] [--key ALG]] [--ca-cn CN] [--ca-key ALG] OUTDIR [DAYS]" >&2
	exit 2
}

leaf= cn= org= sans= eku=serverAuth,clientAuth ku=digitalSignature key_alg=ec-p256
ca_cn=pmem-ca ca_key_alg=ec-p256
while [ $# -gt 0 ]; do
	case $1 in
	--node | --leaf | --cn | --org | --san | --usage | --key-usage | --key | --ca-cn | --ca-key)
		[ $# -ge 2 ] || usage
		case $1 in
		--node) leaf=$2 cn=$2 sans="${sans}${sans:+,}DNS:pmem-node-controller" ;;
		--leaf) leaf=$2 ;;
		--cn) cn=$2 ;;
		--org) org=$2 ;;
		--san) sans="$sans${sans:+,}$2" ;;
		--usage) eku=$2 ;;
		--key-usage) ku=$2 ;;
		--key) key_alg=$2 ;;
		--ca-cn) ca_cn=$2 ;;
		--ca-key) ca_key_alg=$2 ;;
		esac
		shift 2
		;;
	--) shift; break ;;
	-*) usage ;;
	*) break ;;
	esac
done
if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
outdir=$1
days=${2:-365}
ca_days=${CA_DAYS:-3650}

case $days in '' | *[!0-9]* | 0*) echo "$prog: DAYS must be a positive integer, got '$days'" >&2; exit 2 ;; esac
case $ca_days in '' | *[!0-9]* | 0*) echo "$prog: CA_DAYS must be a positive integer, got '$ca_days'" >&2; exit 2 ;; esac
# Names end up in file names and openssl configuration files: plain ones only.
plain() {
	case $2 in
	'' | *[!A-Za-z0-9.:_@*-]*) echo "$prog: $1 '$2' may hold only letters, digits and . : _ @ * -" >&2; exit 2 ;;
	esac
}
if [ -n "$leaf" ]; then
	plain --leaf "$leaf"
	case $leaf in .* | *:* | *@* | *\** ) echo "$prog: --leaf '$leaf' is not a file name" >&2; exit 2 ;; esac
	plain --cn "${cn:-$leaf}"
	[ -z "$org" ] || plain --org "$org"
elif [ -n "$cn$org$sans" ]; then
	echo "$prog: --cn, --org and --san describe a --leaf" >&2
	exit 2
fi
plain --ca-cn "$ca_cn"
for s in $(echo "$sans" | tr , ' '); do plain --san "$s"; done
for s in $(echo "$eku,$ku" | tr , ' '); do plain --usage "$s"; done

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

# newkey FILE ALG
newkey() {
	case $2 in
	ec-p256) run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" ;;
	ec-p384) run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out "$1" ;;
	ec-p521) run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-521 -out "$1" ;;
	rsa-2048 | rsa-3072 | rsa-4096)
		run openssl genpkey -algorithm RSA -pkeyopt "rsa_keygen_bits:${2#rsa-}" -out "$1" ;;
	*) echo "$prog: unknown key algorithm '$2'" >&2; exit 2 ;;
	esac
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
	newkey "$work/ca.key" "$ca_key_alg"
	cat >"$work/ca.cnf" <<-EOF
		[req]
		prompt = no
		distinguished_name = dn
		x509_extensions = v3_ca
		[dn]
		CN = $ca_cn
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
	echo "$prog: created CA $ca_crt and $ca_key (CN $ca_cn, valid $ca_days days)"
fi

# --- leaves ---------------------------------------------------------------
# issue NAME CN ORG SANS EKU KU ALG: OUTDIR/NAME.crt and .key signed by the CA.
issue() {
	name=$1
	newkey "$work/$name.key" "$7"
	{
		printf '[req]\nprompt = no\ndistinguished_name = dn\n[dn]\nCN = %s\n' "$2"
		[ -z "$3" ] || printf 'O = %s\n' "$3"
	} >"$work/$name.cnf"
	run openssl req -new -sha256 -config "$work/$name.cnf" -key "$work/$name.key" \
		-out "$work/$name.csr"
	{
		echo "basicConstraints = critical, CA:FALSE"
		[ "$6" = none ] || echo "keyUsage = critical, $6"
		[ "$5" = none ] || echo "extendedKeyUsage = $5"
		[ -z "$4" ] || echo "subjectAltName = $4"
		echo "subjectKeyIdentifier = hash"
		echo "authorityKeyIdentifier = keyid, issuer"
	} >"$work/$name.ext"
	run openssl x509 -req -sha256 -in "$work/$name.csr" -CA "$ca_crt" -CAkey "$ca_key" \
		-set_serial "$(serial)" -days "$days" -extfile "$work/$name.ext" \
		-out "$work/$name.crt"
	case ",$5," in *,serverAuth,*) run openssl verify -CAfile "$ca_crt" -purpose sslserver "$work/$name.crt" ;; esac
	case ",$5," in *,clientAuth,*) run openssl verify -CAfile "$ca_crt" -purpose sslclient "$work/$name.crt" ;; esac
	chmod 644 "$work/$name.crt"
	chmod 600 "$work/$name.key"
	mv "$work/$name.key" "$outdir/$name.key"
	mv "$work/$name.crt" "$outdir/$name.crt"
	echo "$prog: created $outdir/$name.crt and $outdir/$name.key (CN $2${3:+, O $3}${4:+, SAN $4}, $7, valid $days days)"
}

# A bare SAN is a DNS name; "none" is no SAN at all.
san_list() {
	out=
	for s in $(echo "$1" | tr , ' '); do
		case $s in none) continue ;; DNS:* | IP:*) ;; *) s=DNS:$s ;; esac
		out="$out${out:+, }$s"
	done
	echo "$out"
}

if [ -n "$leaf" ]; then
	cn=${cn:-$leaf}
	issue "$leaf" "$cn" "$org" "$(san_list "${sans:-$cn}")" "$eku" "$ku" "$key_alg"
else
	for name in pmem-registry pmem-node-controller; do
		issue "$name" "$name" "" "DNS:$name" serverAuth,clientAuth digitalSignature ec-p256
	done
fi
