# Sourced by the hack/build-*.sh scripts: installs the Debian packages a build needs when
# they are missing, with apt-get, as root; otherwise (not root, no apt-get, or the
# switch variable set to 0) a missing package is an error that names it and the command
# that installs it.
#
#   ensure_debian_packages <script name> <switch variable> <package>...

missing_debian_packages() {
    local p
    for p in "$@"; do
        [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] || echo "$p"
    done
}

ensure_debian_packages() {
    local who=$1 switch=$2 missing t0=$SECONDS
    shift 2
    missing="$(missing_debian_packages "$@" | tr '\n' ' ')"
    missing="${missing% }"
    [[ -z "$missing" ]] && return 0
    if [[ "${!switch:-1}" == 0 || "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
        echo "$who: missing Debian packages: $missing" >&2
        echo "$who: install them with: apt-get install -y --no-install-recommends $missing" >&2
        exit 1
    fi
    echo "$who: installing Debian packages: $missing"
    apt-get update -qq
    # shellcheck disable=SC2086  # one word per package
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    echo "$who: packages installed in $((SECONDS - t0))s"
}
