#!/usr/bin/env bash
# The Debian packages the test suite needs: espeak-ng and sox make its speech (flite and
# festival are the demo model's other voice engines, whose voices are tested), chromium
# runs the browser tests, prometheus brings promtool for the tests of deploy/. Installs
# what is missing when it can (root with apt-get); otherwise says what to install and
# fails, rather than letting 100 tests error later. `system_deps.sh image` adds what the
# container image test needs: debootstrap makes its base, buildah builds and runs it,
# podman imports the base.
set -euo pipefail
missing=()
if [ "${1:-}" = image ]; then
  for tool in debootstrap buildah podman; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
fi
command -v espeak-ng >/dev/null || missing+=(espeak-ng)
command -v flite >/dev/null || missing+=(flite)
command -v text2wave >/dev/null || missing+=(festival festvox-kallpc16k festvox-us-slt-hts)
command -v sox >/dev/null || missing+=(sox libsox-fmt-all)
command -v promtool >/dev/null || missing+=(prometheus)
# The browser tests honour the same two settings (tests/web/conftest.py).
if [ "${SENSESTREAM_SKIP_BROWSER:-}" != 1 ] \
  && ! [ -x "${SENSESTREAM_CHROMIUM:-/usr/bin/chromium}" ]; then
  missing+=(chromium)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing ${missing[*]} (Debian packages the tests need)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "the tests need these Debian packages: ${missing[*]}" >&2
  echo "install them (sudo apt-get install ${missing[*]}) and run make test again" >&2
  exit 1
fi
