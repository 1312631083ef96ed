#!/usr/bin/env bats
# The debian flavor (issue #3): pip without flags, venv, git, cc; a wheel
# installed offline into a stage over the debian base; isopod building and
# unit-testing itself inside a debian sandbox.  Real VM boots under TCG here:
# the tests marked [slow] take minutes.  With ISOPOD_DEBIAN=0 (make images did
# not build the flavor) the debian tests are skipped, and say so.

load helpers

setup_file() {
	isopod_setup_file --images
	DATA="$(mktemp -d /tmp/isopod-t35-data.XXXXXX)"
	export DATA
}

teardown_file() {
	rm -rf "$DATA"
	isopod_teardown_file
}

isopod() { "$ISOPOD_SRC/sh/isopod" "$@"; }

# need_debian: skip when the flavor was not built on purpose; fail when it
# should have been (a suite that silently skips proves nothing).
need_debian() {
	if [ "${ISOPOD_DEBIAN:-1}" = 0 ]; then
		skip "ISOPOD_DEBIAN=0: make images did not build the debian flavor"
	fi
	if [ ! -f "$ISOPOD_HOME/images/current-debian" ]; then
		echo "no debian image registered: run make images" >&2
		return 1
	fi
	DEBIAN_IMG="$ISOPOD_HOME/images/base-$(head -n 1 "$ISOPOD_HOME/images/current-debian").img"
}

# show: the result and diagnostics of the last run, for a failing test.
show() {
	echo "status: $status" >&2
	echo "output: $output" >&2
	echo "stderr: $stderr" >&2
}

# make_wheel DIR: a pure-python wheel isopodprobe-1.0-py3-none-any.whl in DIR,
# zipped by hand (no setuptools, no network): a .whl is a zip of the package
# and a .dist-info with METADATA, WHEEL and a RECORD of sha256s.
make_wheel() {
	python3 - "$1" <<'EOF'
import base64, hashlib, os, sys, zipfile
out = sys.argv[1]
files = {
    "isopodprobe/__init__.py": b'VALUE = "probe-42"\n',
    "isopodprobe-1.0.dist-info/METADATA":
        b"Metadata-Version: 2.1\nName: isopodprobe\nVersion: 1.0\n"
        b"Summary: isopod test wheel\n",
    "isopodprobe-1.0.dist-info/WHEEL":
        b"Wheel-Version: 1.0\nGenerator: isopod-t35\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
}
rec = []
for name, data in files.items():
    d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rec.append("%s,sha256=%s,%d" % (name, d, len(data)))
rec.append("isopodprobe-1.0.dist-info/RECORD,,")
files["isopodprobe-1.0.dist-info/RECORD"] = ("\n".join(rec) + "\n").encode()
path = os.path.join(out, "isopodprobe-1.0-py3-none-any.whl")
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    for name, data in files.items():
        z.writestr(name, data)
EOF
}

@test "debian [slow]: pip installs a copied-in wheel offline into a stage; the base stays byte-identical" {
	need_debian
	mkdir -p "$DATA/whl"
	make_wheel "$DATA/whl"
	whl=isopodprobe-1.0-py3-none-any.whl
	before=$(file_sha256 "$DEBIAN_IMG")
	run --separate-stderr isopod run --json-only --timeout-s 1200 --mem-mib 1024 \
		--stage debian --commit-as py --copy-in "$DATA/whl/$whl:/root/$whl" \
		-- pip install "/root/$whl"
	[ "$status" -eq 0 ] || { show; false; }
	json_is '.commit.stage.label == "py" and .commit.stage.depth == 1'
	json_is '.commit.stage.base.flavor == "debian" and .on.base.flavor == "debian"'
	[[ "$(jq -r .stdout <<<"$output")" == *"Successfully installed isopodprobe-1.0"* ]]

	run --separate-stderr isopod run --json-only --timeout-s 600 --mem-mib 1024 \
		--stage py -- python3 -c 'import isopodprobe; print(isopodprobe.VALUE)'
	[ "$status" -eq 0 ] || { show; false; }
	json_is '.stdout == "probe-42\n"'
	# The parent (the debian base) is untouched, byte for byte; so is its name.
	[ "$(file_sha256 "$DEBIAN_IMG")" = "$before" ]
	[ "${before%% *}" = "$(head -n 1 "$ISOPOD_HOME/images/current-debian")" ]
}

@test "debian [slow]: pip without flags, venv, git and cc work; no network device" {
	need_debian
	run --separate-stderr isopod run --json-only --timeout-s 1200 --mem-mib 1024 \
		--stage debian -- sh -c 'set -e
		git --version
		cc --version | head -n 1
		python3 -m pip --version
		if ls /usr/lib/python3*/EXTERNALLY-MANAGED 2>/dev/null; then exit 9; fi
		python3 -m venv /tmp/v
		/tmp/v/bin/python -c "import sys; print(\"venv\", sys.prefix)"
		/tmp/v/bin/pip --version >/dev/null
		echo "net: $(ls /sys/class/net | tr "\n" " ")"
		stat -c "%a %n" /tmp /var/tmp /root
		test -f /etc/machine-id && test ! -s /etc/machine-id && echo machine-id empty'
	[ "$status" -eq 0 ] || { show; false; }
	out=$(jq -r .stdout <<<"$output")
	[[ "$out" == *"git version "* ]]
	[[ "$out" == *"cc (Debian 12."* ]]
	[[ "$out" == *"pip "*"python 3."* ]]
	[[ "$out" == *"venv /tmp/v"* ]]
	[[ "$out" == *"net: lo "* ]]
	[[ "$out" != *"eth"* ]]
	[[ "$out" == *"1777 /tmp"*"1777 /var/tmp"*"700 /root"* ]]
	[[ "$out" == *"machine-id empty"* ]]
}

# Through isopod-mcp (issue 11), driven by the official SDK client as
# t/90-mcp.bats drives it: the sources as a stdin_file tarball, the binary
# back by copy_out beneath the I/O root.  The server runs `isopod run`, so
# the front end's --stdin-file, --copy-out, --stage and --disk-mib are the
# CLI's own path; the pip test above covers the CLI on this flavor.
@test "debian [slow]: isopod builds isopod-exec, the agent and its initramfs through isopod-mcp and their unit tests pass in a sandbox; the binary runs on the host" {
	need_debian
	[ -d "$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk" ] || {
		echo "t/mcp/node_modules missing: run sh .ci/setup (npm ci in t/mcp)" >&2
		return 1
	}
	mkdir -p "$DATA/out"
	# A part of the tree, not all of it: the host's build (CI's, make all)
	# and its unit run (ASan, UBSan) cover every tool and test; here, under
	# TCG, the make of every tool and the whole unit run took ~5 min of
	# CI's hour.  What this shows is a real build through sandbox_run: the
	# tree in by stdin_file, isopod-exec (the host library, lib/*.o, and the
	# tool) and the agent (static musl) with its initramfs made by the
	# Makefile's own rules, the unit tests of that code passing in the
	# guest, the binary and the initramfs out by copy_out, and the binary
	# running on the host.  Every test header goes in (t/unit/*.h): a
	# test that includes a new one must not fail to build here only (stop
	# 43's rehearsal: util_test's fsyncs.h was left out of a list).
	(cd "$ISOPOD_SRC" && tar --exclude='*.bin' --exclude='*.o' \
		-czf "$DATA/src.tgz" \
		Makefile lib/*.c lib/*.h bin/isopod-exec.c agent/*.c agent/*.h images/mkinitramfs \
		images/lib.sh t/unit/*.h t/unit/frame_test.c t/unit/util_test.c t/unit/agent_test.c t/unit/agent_stdin_test.c \
		t/unit/exec_test.c t/run-unit)
	local args
	# The unit run's log is past the result's 64 KiB of stdout (stop 25's
	# CI lost its summary line to that): the guest keeps it and the
	# compiler's, and prints what is checked here, its not-ok lines (with
	# their context when one fails), the programs it ran and its summary.
	# Two vCPUs and two compilers at a time (MTTCG runs a vCPU per host
	# thread, and CI runs nothing beside it).  Each unit program's run
	# bounded at 1200 s (UNIT_TIMEOUT: run-unit's default, 300 s, is ~100x
	# the slowest one's CPU on the host, agent_test's 2.6 s at -O0, and
	# TCG is many times slower): a hang there is a "timed out" line within
	# the sandbox's hour, not the hour gone.  The guest's timeout(1) is
	# coreutils' (debootstrap's minbase).
	args=$(jq -nc '{name: "sandbox_run", args: {stage: "debian", timeout_s: 3600, mem_mib: 1024,
		vcpus: 2, disk_mib: 3072, stdin_file: "src.tgz", copy_out: [{guest: "/root/src/bin/isopod-exec", host: "out"}, {guest: "/root/src/build/initramfs.cpio", host: "out"}],
		command: "set -e; mkdir /root/src && cd /root/src && tar -xzf -; make -j2 bin/isopod-exec build/initramfs.cpio >/tmp/make.log 2>&1 || { tail -c 30000 /tmp/make.log; exit 1; }; echo made: $(ls bin/isopod-exec agent/isopod-agent build/initramfs.cpio); UNIT_JOBS=2 UNIT_SANITIZE=0 UNIT_TIMEOUT=1200 sh t/run-unit frame util agent agent_stdin exec >/tmp/unit.log || { grep -E -B4 -A12 \"^not ok\" /tmp/unit.log | head -c 50000; tail -n 1 /tmp/unit.log; exit 1; }; grep -E \"^# t/unit/|^not ok|^[0-9]+ passed, [0-9]+ failed$\" /tmp/unit.log; ./bin/isopod-exec -h"}}')
	MCP_ARGS="[\"--io-root\",\"$DATA\"]" MCP_CALL_TIMEOUT_MS=3700000 run --separate-stderr \
		node "$ISOPOD_SRC/t/mcp/client.mjs" call "$args"
	[ "$status" -eq 0 ] || { show; false; }
	json_is '.result.isError == false and .result.structuredContent.exit_code == 0' || { show; false; }
	out=$(jq -r .result.structuredContent.stdout <<<"$output")
	[[ "$out" == *"made: agent/isopod-agent bin/isopod-exec build/initramfs.cpio"* ]]
	# each of the four programs ran, in order, and their tests passed
	[ "$(grep -E '^# t/unit/' <<<"$out" | tr '\n' ' ')" = "# t/unit/frame_test.c # t/unit/util_test.c # t/unit/agent_test.c # t/unit/agent_stdin_test.c # t/unit/exec_test.c " ]
	[[ "$out" == *" passed, 0 failed"* ]]
	echo "# unit tests in the guest: $(grep -E '^[0-9]+ passed, [0-9]+ failed$' <<<"$out")" >&3
	[[ "$out" != *"not ok"* ]]
	[[ "$(grep -E '^[0-9]+ passed, 0 failed$' <<<"$out")" != "0 passed, 0 failed" ]]
	json_is '.result.structuredContent.copied_out[0] | .error == null and .bytes > 0 and .host == "out/isopod-exec"'
	# the initramfs: the agent as /init
	json_is '.result.structuredContent.copied_out[1] | .error == null and .bytes > 0'
	[ "$(cd "$DATA/out" && cpio -it <initramfs.cpio 2>/dev/null | tr '\n' ' ')" = "dev dev/console mnt newroot proc sys init " ]
	[ -x "$DATA/out/isopod-exec" ]
	run "$DATA/out/isopod-exec" -h
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: isopod-exec "* ]]
}

# build_fresh FLAVOR N: images/build-base FLAVOR in the fresh cache
# $BATS_TEST_TMPDIR/cN (sets status, output, stderr).  build-base places the
# image into the repo's build/: the files there are put back right after,
# even when the build fails (hard links to the build cache's).
build_fresh() {
	local f
	for f in "base-$1.img" "base-$1.inputs.json"; do
		[ ! -e "$ISOPOD_SRC/build/$f" ] || ln -f "$ISOPOD_SRC/build/$f" "$BATS_TEST_TMPDIR/keep-$f"
	done
	ISOPOD_CACHE="$BATS_TEST_TMPDIR/c$2" run --separate-stderr sh "$ISOPOD_SRC/images/build-base" "$1"
	for f in "base-$1.img" "base-$1.inputs.json"; do
		[ ! -e "$BATS_TEST_TMPDIR/keep-$f" ] || ln -f "$BATS_TEST_TMPDIR/keep-$f" "$ISOPOD_SRC/build/$f"
	done
}

# sha FILE: its sha256 (the content address images/register gives it), by
# OpenSSL when installed (t/helpers.bash): the images are 2-3 GiB, mostly
# holes, and coreutils' sha256sum took 6.7 s for the base alone.
sha() {
	file_sha256 "$1"
}

# Not a boot: the base flavor's build, twice, each in a fresh cache of its
# own (README: "the same inputs give the same sha256").
@test "base image: two builds in fresh caches have the same sha256; 2 GiB free in a sparse file (a few MiB on disk), every inode table zeroed" {
	[ "$(id -u)" -eq 0 ] || skip "images/build-base runs as root"
	for i in 1 2; do
		build_fresh base "$i"
		[ "$status" -eq 0 ] || { show; false; }
	done
	a=$(echo "$BATS_TEST_TMPDIR"/c1/base/*/base.img)
	b=$(echo "$BATS_TEST_TMPDIR"/c2/base/*/base.img)
	[ -f "$a" ] && [ -f "$b" ] && [ "$(stat -c %i "$a")" != "$(stat -c %i "$b")" ] || false
	[ "$(sha "$a")" = "$(sha "$b")" ]
	echo "# $(stat -c %s "$a") bytes, $(du -k "$a" | cut -f1) KiB on disk" >&3
	[ "$(du -k "$a" | cut -f1)" -le 16384 ]
	free=$(dumpe2fs -h "$a" 2>/dev/null | awk -F: '/^Free blocks/ {print $2 * 4}')
	[ "$free" -ge $((2 * 1024 * 1024)) ]
	# no group left for the kernel's lazy inode-table init at the first mount
	dumpe2fs "$a" 2>/dev/null | grep -q '^Group 1[0-9]*:'
	! dumpe2fs "$a" 2>/dev/null | grep '^Group [0-9]*:' | grep -qv ITABLE_ZEROED || false
}

# Not a boot: the registered image's one apt source, read from the ext4
# file with debugfs, is the snapshot.debian.org archive of the release it
# was built from, a day after that InRelease's Date (images/build-base
# snapshot_url), as its inputs say.  t/47 installs a package through it.
@test "debian: the image's apt source is the snapshot of the release it was built from, recorded in its inputs" {
	need_debian
	local sha meta want ts
	sha=$(head -n 1 "$ISOPOD_HOME/images/current-debian")
	meta="$ISOPOD_HOME/images/base-$sha.json"
	ts=$(date -u -d "@$(($(date -u -d "$(jq -r .inputs.release.date "$meta")" +%s) + 86400))" +%Y%m%dT%H%M%SZ)
	want="http://snapshot.debian.org/archive/debian/$ts/"
	echo "inputs: $(jq -c '.inputs | {release, apt_source}' "$meta")" >&2
	[ "$(jq -r .inputs.apt_source "$meta")" = "$want" ]
	run --separate-stderr debugfs -R 'cat /etc/apt/sources.list' "$DEBIAN_IMG"
	echo "sources.list: $output" >&2
	[ "$status" -eq 0 ]
	[ "$output" = "deb [check-valid-until=no] $want bookworm main" ]
	# no other source, no lists: apt-get update fetches them
	run --separate-stderr debugfs -R 'ls -l /etc/apt/sources.list.d' "$DEBIAN_IMG"
	! grep -q '\.list\|\.sources' <<<"$output" || false
	run --separate-stderr debugfs -R 'ls /var/lib/apt/lists' "$DEBIAN_IMG"
	! grep -q InRelease <<<"$output" || false
}

# The debian flavor a second time, in a fresh cache, against the one make
# images built: ~3 min and ~220 MB from the same Debian mirror make images
# uses, so only with ISOPOD_TEST_SLOW=1.  The same key (the mirror's
# InRelease has not moved since) must give the same sha256.
@test "debian image [ISOPOD_TEST_SLOW=1]: a second build in a fresh cache has the sha256 of make images' build" {
	[ "${ISOPOD_TEST_SLOW:-0}" = 1 ] || skip "a second debian build runs with ISOPOD_TEST_SLOW=1 (~3 min, the mirror)"
	[ "$(id -u)" -eq 0 ] || skip "images/build-base runs as root"
	need_debian
	local key0 key1
	key0=$(jq -r .key "$ISOPOD_SRC/build/base-debian.inputs.json")
	build_fresh debian 1
	[ "$status" -eq 0 ] || { show; false; }
	key1=$(jq -r .key "$BATS_TEST_TMPDIR"/c1/base/*/inputs.json)
	if [ "$key1" != "$key0" ]; then
		skip "the mirror moved on since make images (key $key0, now $key1): nothing to compare"
	fi
	[ "$(sha "$BATS_TEST_TMPDIR/c1/base/$key1/base.img")" = "$(sha "$ISOPOD_SRC/build/base-debian.img")" ]
}

@test "debian: isopod image build of an unknown flavor is refused with 100" {
	run --separate-stderr isopod image build nosuch
	[ "$status" -eq 100 ]
	[[ "$stderr" == *nosuch* ]]
	run --separate-stderr sh "$ISOPOD_SRC/images/build-base" nosuch
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"unknown flavor: nosuch"* ]]
}
