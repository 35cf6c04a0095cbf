#!/usr/bin/env bash
# Makes a CA and one certificate per name, for a cluster with [tls]:
#
#   scripts/certs.sh DIR NAME...
#
# DIR/ca.pem and DIR/ca.key: the CA (made once; an existing one in DIR is
# kept, so names can be added later). DIR/NAME.pem and DIR/NAME.key for
# each NAME: a certificate for the host NAME (a DNS name or an IP address,
# the host of a node's node.advertised), valid as a server and as a
# client, signed by the CA. A tool's client certificate is one more NAME.
#
# For tests and trials: the CA's key lies next to the certificates it
# signed. A production cluster takes its certificates from its own CA.
# Needs openssl. COLO_CERT_DAYS sets the validity (default 825 days).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 DIR NAME..." >&2
  exit 2
fi
dir=$1
shift
days=${COLO_CERT_DAYS:-825}
mkdir -p "$dir"
umask 077
if [ ! -f "$dir/ca.pem" ] || [ ! -f "$dir/ca.key" ]; then
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" -days "$days" -subj "/CN=colo CA $(date +%s)" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi
for name in "$@"; do
  case "$name" in
    */* | '' ) echo "$0: not a host name: '$name'" >&2; exit 2 ;;
  esac
  if [[ "$name" =~ ^[0-9.]+$ || "$name" == *:* ]]; then
    san="IP:$name"
  else
    san="DNS:$name"
  fi
  extensions=$(mktemp)
  printf '%s\n' \
    "subjectAltName=$san" \
    "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=serverAuth,clientAuth" >"$extensions"
  # The new key and certificate are written next to the old ones and then
  # moved over them, so a node that reloads never reads half a file.
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$dir/.$name.key" -out "$dir/.$name.csr" -subj "/CN=$name" 2>/dev/null
  openssl x509 -req -in "$dir/.$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$extensions" \
    -out "$dir/.$name.pem" 2>/dev/null
  rm -f "$dir/.$name.csr" "$extensions"
  mv "$dir/.$name.key" "$dir/$name.key"
  mv "$dir/.$name.pem" "$dir/$name.pem"
  echo "$dir/$name.pem"
done
