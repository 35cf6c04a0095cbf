#!/usr/bin/env bash
# Copies the jars tests/kafka/pom.xml names into target/kafka/lib (Maven
# keeps them in its local repository too), once: a second run with the same
# pom does nothing. The copy goes to a directory of its own first and is
# moved into place whole, so a broker never starts on half of it.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=target/kafka/lib
mkdir -p target/kafka
# One fetch at a time (tests started on their own fetch when it is missing).
exec 9>target/kafka/.fetch.lock
flock 9
stamp=$(sha256sum tests/kafka/pom.xml | cut -d' ' -f1)
if [ -f "$lib/.pom-sha256" ] && [ "$(cat "$lib/.pom-sha256")" = "$stamp" ]; then
  exit 0
fi
fresh=$(mktemp -d target/kafka/lib.XXXXXX)
mvn -q -B -Dstyle.color=never -f tests/kafka/pom.xml dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$PWD/$fresh"
echo "$stamp" > "$fresh/.pom-sha256"
rm -rf "$lib"
mv "$fresh" "$lib"
