#!/usr/bin/env bats
# Stages travel through an OCI registry (issue 16, first slice): isopod
# stage push / pull (isopod-oci) against Debian's docker-registry in the
# sealed lab of t/lab/lab.sh (198.51.100.20:5000 in the lab's inet netns;
# the tool runs in its host netns: nothing leaves this machine), and
# against t/oci/liar.py (198.51.100.21:5000), the same registry altered to
# lie.  The stages are made without a VM (t/oci/mkchain.sh: qcow2 layers
# on a fake 8 MiB base; the last test's on the real base by debugfs); one
# boot runs a pulled stage.  ~55 s alone, most of it the lab's set-up (13 s),
# the chain (9 s), the liar's pulls and the boot.

load helpers

setup_file() {
	[ "$(id -u)" -eq 0 ] || skip "needs root: network namespaces"
	command -v docker-registry >/dev/null || skip "docker-registry not installed (.ci/setup)"
	export LAB="$BATS_TEST_DIRNAME/lab/lab.sh" LAB_NAME="t32o$$"
	export ISOPOD_LAB_STATE="$BATS_FILE_TMPDIR/lab"
	sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
	sh "$LAB" up "$LAB_NAME" >/dev/null
	export REG
	REG=$(sh "$LAB" registry "$LAB_NAME")
	export LIAR=198.51.100.21:5000 MODE="$BATS_FILE_TMPDIR/liar.mode"
	echo honest >"$MODE"
	ip netns exec "$LAB_NAME-inet" ip addr add 198.51.100.21/32 dev lo
	ip netns exec "$LAB_NAME-inet" python3 "$BATS_TEST_DIRNAME/oci/liar.py" 198.51.100.21 5000 \
		"$REG" "$MODE" </dev/null >"$BATS_FILE_TMPDIR/liar.log" 2>&1 3>&- &
	echo $! >"$BATS_FILE_TMPDIR/liar.pid"
	export T="$BATS_FILE_TMPDIR/stores"
	mkdir -p "$T"
	# store a: a chain of 15 layers (s1..s15) on a fake base
	sh "$BATS_TEST_DIRNAME/oci/mkchain.sh" "$T/a" 15 >"$T/a.ids"
	# the last test's store: its kernel and base registered there (a
	# missing image is that test's failure)
	isopod_setup_file
}

teardown_file() {
	local pid
	pid=$(cat "$BATS_FILE_TMPDIR/liar.pid" 2>/dev/null) && kill "$pid" 2>/dev/null
	isopod_teardown_file
	[ -z "${LAB-}" ] || sh "$LAB" down "$LAB_NAME"
}

# st HOME ARGS...: `isopod stage ARGS` with store HOME, in the lab's host netns.
st() {
	local home=$1
	shift
	run --separate-stderr ip netns exec "$LAB_NAME-host" env ISOPOD_HOME="$home" PATH="$PATH" \
		"$ISOPOD_SRC/sh/isopod" stage "$@"
}
# what a store holds below its top directories
# what a store holds below its top directories, but the jail's ldd cache
# (jail/deps-*.json, lib/jaildeps.c: the jailed qemu-img that checks a
# fetched layer leaves it; it is no stage data)
written() { (cd "$1" 2>/dev/null && find . -mindepth 2 ! -path './jail/*' | sort); }
lie() { echo "$*" >"$MODE"; }
# pull_altered FROM ID NAME EDIT TO STATUS WANT: stage ID of store $T/FROM,
# its meta.json edited by the jq filter EDIT and sealed anew as it is now
# (trust on first use: its seal dropped), is pushed as NAME:v1 and pulled
# into store $T/TO: refused with STATUS, stderr saying WANT, nothing written.
pull_altered() {
	local from=$T/$1 id=$2 name=$3 edit=$4 to=$T/$5 want_status=$6 want=$7
	jq "$edit | del(.seal)" "$from/stages/$id/meta.json" >"$from.meta"
	mv "$from.meta" "$from/stages/$id/meta.json"
	ISOPOD_HOME="$from" isopod-stage verify --reseal "$id" >/dev/null
	st "$from" push --plain-http "$id" "$REG/isopod/$name:v1"
	[ "$status" -eq 0 ]
	st "$to" pull --plain-http "$REG/isopod/$name:v1"
	[ "$status" -eq "$want_status" ]
	[[ "$stderr" == *"$want"* ]]
	[ -z "$(written "$to")" ]
}

@test "push: a 15-layer chain and its base, one manifest each naming its parent by digest; again: nothing moves; one layer more: one layer moves" {
	st "$T/a" push --plain-http s15 "$REG/isopod/chain:v1"
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
	echo "$output" >"$T/push1.json"
	# 15 layers + the base, and their 16 configs; 16 manifests + the tag
	jq -e '.blobs.uploaded == 32 and .blobs.present == 0 and .blobs.manifests == 17' <<<"$output"
	[ "$(jq -r '.layers[].stage' <<<"$output")" = "$(cat "$T/a.ids")" ]
	# the registry's manifest of the leaf: our artifact, subject = the parent's manifest
	m=$(ip netns exec "$LAB_NAME-host" curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
		"http://$REG/v2/isopod/chain/manifests/v1")
	jq -e --argjson p "$output" '.artifactType == "application/vnd.isopod.stage.v1" and
		.config.mediaType == "application/vnd.isopod.stage.config.v1+json" and
		.subject.digest == $p.layers[13].digest and .layers[0].digest == $p.layers[14].layer' <<<"$m"
	[ "sha256:$(printf %s "$m" | sha256sum | cut -d' ' -f1)" = "$(jq -r .digest <<<"$output")" ]
	# the root stage names the base's manifest
	r=$(ip netns exec "$LAB_NAME-host" curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
		"http://$REG/v2/isopod/chain/manifests/$(head -1 "$T/a.ids")")
	jq -e --argjson p "$output" '.subject.digest == $p.base.digest' <<<"$r"

	st "$T/a" push --plain-http s15 "$REG/isopod/chain:v1"
	[ "$status" -eq 0 ]
	jq -e '.blobs.uploaded == 0 and .blobs.bytes == 0 and .blobs.present == 32 and .blobs.manifests == 0' \
		<<<"$output"

	sh "$BATS_TEST_DIRNAME/oci/mkchain.sh" "$T/a" 1 1 s "$(tail -1 "$T/a.ids")" >"$T/a16.id"
	st "$T/a" push --plain-http s16 "$REG/isopod/chain:v2"
	[ "$status" -eq 0 ]
	echo "$output" >"$T/push2.json"
	sz=$(stat -c %s "$T/a/stages/$(cat "$T/a16.id")/layer.qcow2")
	# the new layer and its config; its manifest and the tag v2
	jq -e --argjson sz "$sz" '.blobs.uploaded == 2 and .blobs.present == 32 and .blobs.manifests == 2 and
		.blobs.bytes > $sz and .blobs.bytes < $sz + 4096' <<<"$output"
}

@test "pull: lands the chain as a commit would (same ids and bytes, 0444, sealed with the verified digest); again: nothing moves; a chain one longer: one layer moves" {
	st "$T/b" pull --plain-http "$REG/isopod/chain:v1"
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
	jq -e '.blobs.fetched == 16 and .blobs.present == 0 and .base.status == "pulled" and
		([.layers[].status] | unique) == ["pulled"]' <<<"$output"
	for id in $(cat "$T/a.ids"); do
		cmp "$T/a/stages/$id/layer.qcow2" "$T/b/stages/$id/layer.qcow2"
		[ "$(stat -c %a "$T/b/stages/$id/layer.qcow2")" = 444 ]
		diff <(jq -S 'del(.seal, .pulled)' "$T/a/stages/$id/meta.json") \
			<(jq -S 'del(.seal, .pulled)' "$T/b/stages/$id/meta.json")
		jq -e --arg s "$(sha256sum <"$T/a/stages/$id/layer.qcow2" | cut -d' ' -f1)" \
			'.seal.hash == "done" and .seal.sha256 == $s and (.pulled.from | endswith("chain:v1"))' \
			"$T/b/stages/$id/meta.json"
	done
	cmp "$T"/a/images/base-*.img "$T"/b/images/base-*.img
	[ -z "$(find "$T/b" -name '*.tmp*')" ]
	run --separate-stderr env ISOPOD_HOME="$T/b" isopod-stage verify s15
	[ "$status" -eq 0 ]
	jq -e '.ok and ([.layers[].status] | unique) == ["ok"] and .base.status == "ok"' <<<"$output"

	st "$T/b" pull --plain-http "$REG/isopod/chain:v1"
	[ "$status" -eq 0 ]
	jq -e '.blobs.fetched == 0 and .blobs.bytes == 0 and .layers == [.layers[0]] and
		.layers[0].status == "present" and .base == null' <<<"$output"

	st "$T/b" pull --plain-http "$REG/isopod/chain:v2"
	[ "$status" -eq 0 ]
	jq -e '.blobs.fetched == 1 and ([.layers[].status] == ["present", "pulled"]) and .stage == .layers[1].stage' \
		<<<"$output"
	cmp "$T/a/stages/$(cat "$T/a16.id")/layer.qcow2" "$T/b/stages/$(cat "$T/a16.id")/layer.qcow2"
}

@test "two pulls of the same chain at once both land it (a stage landed meanwhile with the same layer is present)" {
	for i in 1 2; do
		ip netns exec "$LAB_NAME-host" env ISOPOD_HOME="$T/k" "$ISOPOD_SRC/bin/isopod-oci" pull --plain-http \
			"$REG/isopod/chain:v1" >"$T/k$i.json" 2>"$T/k$i.err" &
	done
	wait %1
	wait %2
	[ "$(ls "$T/k/stages" | wc -l)" -eq 15 ]
	[ -z "$(find "$T/k" -name '*.tmp*')" ]
	ISOPOD_HOME="$T/k" isopod-stage verify s15 >/dev/null
}

@test "pull by digest: the leaf's manifest must hash to it; a digest the registry lacks is 101, nothing written" {
	d=$(jq -r .digest "$T/push1.json")
	st "$T/c" pull --plain-http "$REG/isopod/chain@$d"
	[ "$status" -eq 0 ]
	jq -e --arg d "$d" '.digest == $d and .blobs.fetched == 16' <<<"$output"
	st "$T/c2" pull --plain-http "$REG/isopod/chain@sha256:$(printf '%064d' 1)"
	[ "$status" -eq 101 ]
	[ -z "$(written "$T/c2")" ]
	st "$T/c2" pull --plain-http "$REG/isopod/chain:nosuch"
	[ "$status" -eq 101 ]
	st "$T/c2" pull --plain-http "$REG/Bad/Repo"
	[ "$status" -eq 100 ]
}

@test "a registry that lies is refused, nothing written: a blob whose digest differs, a truncated blob, a manifest naming a missing parent, a trickle past --timeout-ms (99), a manifest redirected; a credential from --auth-file" {
	leaf=$(jq -r '.layers[-1].layer' "$T/push1.json")
	root=$(jq -r '.layers[0].layer' "$T/push1.json")
	lie flip "$leaf"
	st "$T/l" pull --plain-http "$LIAR/isopod/chain:v1"
	echo "$stderr"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"the registry lies: blob $leaf: the registry sent bytes whose digest is sha256:"*"nothing was written" ]]
	[ -z "$(written "$T/l")" ]

	lie truncate "$root"
	st "$T/l" pull --plain-http "$LIAR/isopod/chain:v1"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"the registry lies: blob $root: the registry sent "*" bytes of "*" (truncated)"* ]]
	[ -z "$(written "$T/l")" ]

	lie orphan
	st "$T/l" pull --plain-http "$LIAR/isopod/chain:v1"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"names a parent sha256:0000000000000000000000000000000000000000000000000000000000000000 it does not have"* ]]
	[ -z "$(written "$T/l")" ]

	# a registry that wants a credential: 401 without it; --auth-file sends it
	lie auth Basic "$(printf u:secret | base64)"
	st "$T/l" pull --plain-http "$LIAR/isopod/chain:v1"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"HTTP 401"* ]]
	[ -z "$(written "$T/l")" ]
	echo 'basic u:secret' >"$T/cred"
	st "$T/l" pull --plain-http --auth-file "$T/cred" "$LIAR/isopod/chain:v1"
	[ "$status" -eq 0 ]
	[ -n "$(written "$T/l")" ]
	echo 'bearer tok3n' >"$T/cred"
	lie auth Bearer tok3n
	st "$T/l2" pull --plain-http --auth-file "$T/cred" "$LIAR/isopod/chain:v1"
	[ "$status" -eq 0 ]

	# a registry that trickles (its manifest, then only the root layer's
	# blob, mid-pull): only the deadline ends the pull (99, out of time, at
	# it), nothing written
	rm -rf "$T/l"
	for m in trickle "trickle $root"; do
		lie "$m"
		t0=$(date +%s%N)
		st "$T/l" pull --plain-http --timeout-ms 2500 "$LIAR/isopod/chain:v1"
		t=$(( ($(date +%s%N) - t0) / 1000000 ))
		echo "$m: $t ms: $stderr"
		[ "$status" -eq 99 ]
		[[ "$stderr" == *"out of time (the caller's deadline)"* ]]
		[ "$t" -ge 2400 ] && [ "$t" -lt 10000 ] || false
		[ -z "$(written "$T/l")" ]
	done
	# a manifest redirected elsewhere (the honest registry itself, here):
	# not followed, refused, nothing written; a blob redirected: followed
	lie redirect manifests
	st "$T/l" pull --plain-http "$LIAR/isopod/chain:v1"
	echo "$stderr"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"the registry answered HTTP 302"* ]]
	[ -z "$(written "$T/l")" ]
	lie redirect blobs
	st "$T/l" pull --plain-http "$LIAR/isopod/chain:v1"
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
	[ -n "$(written "$T/l")" ]

	# the same liar, honest: the same pull lands
	rm -rf "$T/l"
	lie honest
	st "$T/l" pull --plain-http "$LIAR/isopod/chain:v1"
	[ "$status" -eq 0 ]
	[ -n "$(written "$T/l")" ]
}

@test "pull refuses a layer whose backing file is not its parent's (a host file as a disk), nothing written" {
	id=$(sh "$BATS_TEST_DIRNAME/oci/mkchain.sh" "$T/e" 1 1 evil)
	f="$T/e/stages/$id/layer.qcow2"
	chmod 0644 "$f"
	qemu-img rebase -u -f qcow2 -F raw -b /etc/hostname "$f"
	chmod 0444 "$f"
	pull_altered e "$id" evil . f 111 \
		"its layer is refused: its backing file is /etc/hostname (raw), not ../../images/base-"
}

@test "pull refuses a layer whose qcow2 header asks for an external data file (a host path), before any qemu-img opens it" {
	id=$(sh "$BATS_TEST_DIRNAME/oci/mkchain.sh" "$T/x" 1 1 xdata)
	f="$T/x/stages/$id/layer.qcow2"
	chmod 0644 "$f"
	# incompatible feature bit 2, the low byte of the 8-byte field at 72
	printf '\004' | dd of="$f" bs=1 seek=79 conv=notrunc status=none
	chmod 0444 "$f"
	jq 'del(.seal)' "$T/x/stages/$id/meta.json" >"$T/x.meta"
	mv "$T/x.meta" "$T/x/stages/$id/meta.json"
	ISOPOD_HOME="$T/x" isopod-stage verify --reseal "$id" >/dev/null || true
	st "$T/x" push --plain-http "$id" "$REG/isopod/xdata:v1"
	[ "$status" -eq 0 ]
	st "$T/y" pull --plain-http "$REG/isopod/xdata:v1"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"its layer is refused: qcow2 incompatible features 0x4"* ]]
	[ -z "$(written "$T/y")" ]
}

@test "pull: a stage whose name is a flavor here (debian) is refused (102), nothing written" {
	# a name is a reference too: pulled as is, --stage debian would run it
	id=$(sh "$BATS_TEST_DIRNAME/oci/mkchain.sh" "$T/n" 1 1 named)
	pull_altered n "$id" named '.name = "debian"' o 102 "its name debian: "
}

@test "pull: a label this store gives another stage is a conflict (102), nothing written" {
	sh "$BATS_TEST_DIRNAME/oci/mkchain.sh" "$T/g" 2 >/dev/null
	before=$(written "$T/g")
	st "$T/g" pull --plain-http "$REG/isopod/chain:v1"
	[ "$status" -eq 102 ]
	[[ "$stderr" == *"its label s2 is taken here by stage st-"* ]]
	[ "$(written "$T/g")" = "$before" ]
}

@test "a stage on the real base, pushed and pulled into another store on the same base (present: not moved), boots there and reads its file; isopod run --stage REGISTRY/REPO:TAG pulls it itself, a missing tag fails the run (101) before anything boots" {
	# the stage without a VM: /marker written into a copy of the base by
	# debugfs, the difference kept as a qcow2 layer on the base (what
	# flatten makes), rebased, sealed; one boot, on the other side
	isopod_register "$ISOPOD_HOME"
	sha=$(cat "$ISOPOD_HOME/images/current-base")
	id=st-0c1000000001
	d="$ISOPOD_HOME/stages/$id"
	mkdir -p "$d"
	cp "$ISOPOD_HOME/images/base-$sha.img" "$T/m.raw"
	chmod 0644 "$T/m.raw"
	echo pulled-ok >"$T/marker"
	debugfs -w -R "write $T/marker marker" "$T/m.raw" >/dev/null 2>&1
	qemu-img convert -q -f raw -O qcow2 -B "$ISOPOD_HOME/images/base-$sha.img" -F raw "$T/m.raw" "$d/layer.qcow2"
	qemu-img rebase -u -f qcow2 -F raw -b "../../images/base-$sha.img" "$d/layer.qcow2"
	chmod 0444 "$d/layer.qcow2"
	jq -n --arg id "$id" --arg sha "$sha" '{id:$id, name:"oci-marker", label:"oci-marker", parent:null,
		depth:1, base:{flavor:"base", sha256:$sha}, size:0, created:"2026-01-01T00:00:00Z"}' >"$d/meta.json"
	isopod-stage verify --reseal "$id" >/dev/null
	st "$ISOPOD_HOME" push --plain-http oci-marker "$REG/isopod/marker:v1"
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
	# the other host: its own store with the same kernel and base registered
	other="$T/vm-other"
	isopod_register "$other"
	st "$other" pull --plain-http "$REG/isopod/marker:v1"
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
	jq -e '.base.status == "present" and .blobs.fetched == 1 and .blobs.present == 1' <<<"$output"
	run --separate-stderr env ISOPOD_HOME="$other" "$ISOPOD_SRC/sh/isopod" run --json-only --cold \
		--stage oci-marker -- cat /marker
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
	jq -e '.stdout == "pulled-ok\n"' <<<"$output"
	# pull before boot: a third store, `isopod run --stage REGISTRY/REPO:TAG`
	# pulls the chain itself (what a Slurm job on a host without the stage
	# does), then boots on it; the stage is the store's, as pulled
	third="$T/vm-third"
	isopod_register "$third"
	# only from where the configuration says (pull_from): not here, nor a
	# repository that merely starts like the entry; nothing contacted
	printf 'pull_from = %s/isopod\n' "$REG" >"$T/pull.conf"
	for ref in "$REG/isopod/marker:v1" "$REG/isopodx/marker:v1" 169.254.169.254/isopod/marker:v1; do
		conf=$T/pull.conf
		[ "$ref" != "$REG/isopod/marker:v1" ] || conf=/dev/null
		run --separate-stderr ip netns exec "$LAB_NAME-host" env ISOPOD_HOME="$third" ISOPOD_CONFIG="$conf" \
			PATH="$PATH" "$ISOPOD_SRC/sh/isopod" run --stage "$ref" --pull-plain-http -- true
		[ "$status" -eq 100 ]
		jq -e '.error_kind == "usage" and (.error | test("pulled only from a place the configuration names"))' <<<"$output"
	done
	[ ! -e "$third/stages/st-0c1000000001" ]
	run --separate-stderr ip netns exec "$LAB_NAME-host" env ISOPOD_HOME="$third" ISOPOD_CONFIG="$T/pull.conf" PATH="$PATH" \
		"$ISOPOD_SRC/sh/isopod" run --json-only --cold --stage "$REG/isopod/marker:v1" --pull-plain-http -- cat /marker
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
	jq -e '.stdout == "pulled-ok\n" and .on.stage.id == "st-0c1000000001"' <<<"$output"
	jq -e --arg r "$REG/isopod/marker:v1" '.label == "oci-marker" and .pulled.from == $r' \
		"$third/stages/st-0c1000000001/meta.json"
	# a tag the registry lacks: the run fails with the pull's status and
	# reason, nothing claimed or booted
	vms=$(ls -A "$third/vms")
	run --separate-stderr ip netns exec "$LAB_NAME-host" env ISOPOD_HOME="$third" ISOPOD_CONFIG="$T/pull.conf" \
		PATH="$PATH" "$ISOPOD_SRC/sh/isopod" run --json-only --stage "$REG/isopod/marker:v9" --pull-plain-http -- true
	echo "$output"
	[ "$status" -eq 101 ]
	jq -e '.ok == false and .error_kind == "not_found" and (.error | test("marker:v9"))' <<<"$output"
	[ "$(ls -A "$third/vms")" = "$vms" ]
	# the pull options are for a registry's stage only
	run --separate-stderr env ISOPOD_HOME="$third" "$ISOPOD_SRC/sh/isopod" run --stage oci-marker --pull-plain-http -- true
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"for a --stage a registry holds"* ]]
}
