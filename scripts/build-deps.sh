#!/usr/bin/env bash
# Builds the C libraries that a bundled probing (meson -Dbundled=true: the wheel of
# scripts/wheel.sh) links statically, from pinned Debian source packages, into one prefix:
#     scripts/build-deps.sh [DIR]        (DIR: ~/.cache/probing-c/deps; the prefix is DIR/prefix)
# Each library is built as a static archive of position-independent objects (it goes into the
# agent, a shared object) with hidden symbols (nothing of it is exported from the agent into
# the job), with none of its optional dependencies:
#   SQLite 3.40.1        the amalgamation, with the compile options of Debian's own build
#   jansson 2.14         (CMake)
#   libmicrohttpd 0.9.75 --disable-https: no GnuTLS, so nothing of TLS goes into the job
#   libcurl 7.88.1       HTTP only: no TLS, no zlib/brotli/zstd, no IDN, PSL, HTTP/2, SSH, LDAP
#   libunwind 1.6.2      ptrace and generic unwinding for `backtrace --native`, no LZMA/zlib
# The sources come from Debian's archive through apt (`apt-get source`, the machine's own
# Debian sources as deb-src), at the versions pinned below; apt checks them against the signed
# index, and each upstream tarball against the SHA-256 pinned here. docs/install.md says why
# each library is built this way. A second run with the same pins and commands (the script's
# lines but its comments) does nothing.
# Needs, on the build machine only: a C compiler, make, cmake, tclsh (SQLite's amalgamation),
# dpkg-source; installed with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=$(realpath -m "${1:-${XDG_CACHE_HOME:-$HOME/.cache}/probing-c/deps}")
PREFIX="$DIR/prefix"
JOBS=${JOBS:-2}

# package=Debian version; below, the SHA-256 of each upstream (.orig) tarball
PINS="sqlite3=3.40.1-2+deb12u2 jansson=2.14-2 libmicrohttpd=0.9.75-6 curl=7.88.1-10+deb12u15 libunwind=1.6.2-3"
ORIG_SHA256="
aaa776260ab4dc976db34aa7891819484c8676b5b2783123ebc6301e2ca5d655  sqlite3_3.40.1.orig.tar.xz
c739578bf6b764aa0752db9a2fdadcfe921c78f1228c7ec0bb47fa804c55d17b  jansson_2.14.orig.tar.gz
796e7e217a4802679fcac667a4e98501c53185dcf50ca0583870e84192620131  libmicrohttpd_0.9.75.orig.tar.xz
cdb38b72e36bc5d33d5b8810f8018ece1baa29a8f215b4495e495ded82bbf3c7  curl_7.88.1.orig.tar.gz
4a6aec666991fb45d0889c44aede8ad6eb108071c3554fcdff671f9c94794976  libunwind_1.6.2.orig.tar.gz
"

key=$(grep -v '^ *#' "$0" | sha256sum | cut -c1-16)
if [ -f "$PREFIX/.built" ] && [ "$(cat "$PREFIX/.built")" = "$key" ]; then
    echo "build-deps: $PREFIX is up to date"
    exit 0
fi

need=""
command -v cc >/dev/null || need="$need build-essential"
command -v make >/dev/null || need="$need make"
command -v cmake >/dev/null || need="$need cmake"
command -v tclsh >/dev/null || need="$need tcl"
command -v dpkg-source >/dev/null || need="$need dpkg-dev"
if [ -n "$need" ]; then
    echo "build-deps: installing Debian packages:$need"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
fi

rm -rf "$DIR/src" "$DIR/apt" "$PREFIX"
mkdir -p "$DIR/src" "$DIR/apt/lists/partial" "$DIR/apt/sources" "$PREFIX/lib/pkgconfig" "$PREFIX/include"

# A private apt state whose sources are the machine's own Debian sources (those signed with
# Debian's archive key, or naming a debian/ archive) as deb-src: the system's apt configuration
# and lists are left as they are.
for f in /etc/apt/sources.list.d/*.sources; do
    if [ -f "$f" ] && grep -q 'debian-archive-keyring' "$f"; then
        sed -E 's/^Types:.*$/Types: deb-src/' "$f" > "$DIR/apt/sources/$(basename "$f")"
    fi
done
if [ -f /etc/apt/sources.list ]; then
    sed -nE 's|^deb (.*/debian(-security)?/? .*)$|deb-src \1|p' /etc/apt/sources.list \
        > "$DIR/apt/sources/system.list"
fi
[ -n "$(cat "$DIR"/apt/sources/* 2>/dev/null)" ] || {
    echo "build-deps: no Debian archive in this machine's apt sources" >&2; exit 1; }
APT=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$DIR/apt/sources"
     -o "Dir::State::Lists=$DIR/apt/lists" -o APT::Sandbox::User=root)
echo "build-deps: fetching $PINS"
apt-get -qq "${APT[@]}" update
cd "$DIR/src"
# shellcheck disable=SC2086
if ! apt-get -q "${APT[@]}" source $PINS >apt-source.log 2>&1; then
    cat apt-source.log >&2
    echo "build-deps: apt-get source failed (a pinned version no longer in the archive? bump" \
         "PINS and ORIG_SHA256 in scripts/build-deps.sh)" >&2
    exit 1
fi
echo "$ORIG_SHA256" | sed '/^$/d' | sha256sum -c --quiet -

export CFLAGS="-O2 -fPIC -fvisibility=hidden -ffunction-sections -fdata-sections"
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
STATIC=(--prefix="$PREFIX" --libdir="$PREFIX/lib" --disable-shared --enable-static --with-pic)

echo "build-deps: SQLite"
(cd sqlite3-3.40.1
 # Debian's compile options (debian/rules), so the bundled SQLite answers as the system's does;
 # math functions as upstream's configure enables them
 SQLITE_FLAGS="-DSQLITE_ENABLE_MATH_FUNCTIONS $(sed -n '/^export CFLAGS += /,/^$/p' debian/rules \
     | grep -o -- '-DSQLITE_[A-Z0-9_]*\(=[0-9]*\)\?' | tr '\n' ' ')"
 ./configure -q --disable-tcl --disable-readline >/dev/null
 make -s sqlite3.c >/dev/null
 cc $CFLAGS $SQLITE_FLAGS -c sqlite3.c -o sqlite3.o
 ar rcs "$PREFIX/lib/libsqlite3.a" sqlite3.o
 mkdir -p "$PREFIX/include" "$PREFIX/lib/pkgconfig"
 cp sqlite3.h sqlite3ext.h "$PREFIX/include/"
 cat > "$PREFIX/lib/pkgconfig/sqlite3.pc" <<PC
prefix=$PREFIX
Name: SQLite
Description: SQL database engine (static, bundled)
Version: 3.40.1
Libs: -L\${prefix}/lib -lsqlite3
Libs.private: -lm -ldl -lpthread
Cflags: -I\${prefix}/include
PC
)

echo "build-deps: jansson"
cmake -S jansson-2.14 -B jansson-build -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$CFLAGS" \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib -DJANSSON_BUILD_DOCS=OFF \
    -DJANSSON_EXAMPLES=OFF -DJANSSON_WITHOUT_TESTS=ON -DJANSSON_BUILD_SHARED_LIBS=OFF \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null
cmake --build jansson-build -j "$JOBS" >/dev/null
cmake --install jansson-build >/dev/null

echo "build-deps: libmicrohttpd"
(cd libmicrohttpd-0.9.75
 ./configure -q "${STATIC[@]}" --disable-https --without-gnutls --disable-curl --disable-doc \
     --disable-examples >/dev/null
 make -s -j "$JOBS" -C src/microhttpd >/dev/null
 make -s -C src/microhttpd install >/dev/null
 make -s -C src/include install >/dev/null
 make -s install-pkgconfigDATA >/dev/null)

echo "build-deps: libcurl"
(cd curl-7.88.1
 ./configure -q "${STATIC[@]}" --without-ssl --without-zlib --without-brotli --without-zstd \
     --without-libpsl --without-libidn2 --without-nghttp2 --without-ngtcp2 --without-nghttp3 \
     --without-libssh2 --without-libssh --without-librtmp --without-libgsasl --without-gssapi \
     --disable-ldap --disable-ldaps --disable-ftp --disable-file --disable-rtsp --disable-dict \
     --disable-telnet --disable-tftp --disable-pop3 --disable-imap --disable-smb --disable-smtp \
     --disable-gopher --disable-mqtt --disable-manual --disable-ntlm-wb --disable-alt-svc \
     --disable-hsts --without-ca-bundle --without-ca-path >/dev/null
 make -s -j "$JOBS" -C lib >/dev/null
 make -s -C lib install >/dev/null
 make -s -C include install >/dev/null
 make -s install-pkgconfigDATA >/dev/null)

echo "build-deps: libunwind"
(cd libunwind-1.6.2
 ./configure -q "${STATIC[@]}" --disable-minidebuginfo --disable-zlibdebuginfo \
     --disable-documentation --disable-tests --disable-coredump --disable-setjmp \
     --disable-cxx-exceptions >/dev/null
 make -s -j "$JOBS" >/dev/null
 make -s install >/dev/null)

rm -rf "$PREFIX/bin" "$PREFIX/share" "$PREFIX"/lib/*.la
echo "$key" > "$PREFIX/.built"
echo "build-deps: done: $(cd "$PREFIX/lib" && ls ./*.a | tr '\n' ' ')"
