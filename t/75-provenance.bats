#!/usr/bin/env bats
# shellcheck disable=SC2154 # $stderr: set by bats' run --separate-stderr
# Provenance for what a run copies out (issue 15): isopod run --provenance,
# isopod-provenance sign|verify, isopod verify-artifact.  Each refusal the
# issue lists is its own test.  Two real boots on the busybox base, shared
# by every test (setup_file): run A commits a stage and copies out a tool it
# made; run B forks that stage and copies out the same bytes, so the two
# envelopes differ in their chain only.

load helpers

DSSE_PY=/usr/bin/python3 # Debian's, with python3-securesystemslib

setup_file() {
	[ "$(id -u)" -eq 0 ] || skip "needs root: the host key directory is root's"
	isopod_setup_file --images
	D=$BATS_FILE_TMPDIR
	export D
	export ISOPOD_ATTEST_DIR="$D/keys"
	# The host's own attestation (if any) is not this test's.
	export ISOPOD_ATTESTATION="$D/no-attestation.json"
	"$ISOPOD_SRC/bin/isopod-attest" keygen >/dev/null
	"$ISOPOD_SRC/bin/isopod-attest" keygen --dir "$D/keys2" >/dev/null
	"$ISOPOD_SRC/sh/isopod" run --json-only --commit-as t75-tools --env SECRET=hunter2 \
		--copy-out "/tmp/app:$D/base.bin" --provenance "$D/base.prov" -- \
		sh -c 'mkdir -p /opt && printf "#!/bin/sh\necho built\n" >/tmp/app && cp /tmp/app /opt/tool' \
		>"$D/a.json" <&-
	# B reads a script on stdin that it does not use: its digest is signed
	printf 'echo from stdin\n' >"$D/build.sh"
	"$ISOPOD_SRC/sh/isopod" run --json-only --stage t75-tools --cwd /opt --stdin-file "$D/build.sh" \
		--copy-out "/tmp/app:$D/app.bin" --provenance "$D/app.prov" -- cp /opt/tool /tmp/app \
		>"$D/b.json"
}

teardown_file() {
	isopod_teardown_file
}

isopod() { "$ISOPOD_SRC/sh/isopod" "$@"; }
payload() { jq -r .payload "$1" | base64 -d; }
nvms() { find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

@test "a build's binary copied out with provenance verifies: subject, builder, chain by digest, command, network" {
	local sid sha
	jq -e '.ok and .exit_code == 0 and .commit.stage.id' "$D/a.json"
	jq -e '.ok and .exit_code == 0' "$D/b.json"
	sid=$(jq -r .commit.stage.id "$D/a.json")
	sha=$(sha256sum <"$D/app.bin" | cut -c1-64)
	jq -e --arg s "$sha" --arg p "$D/app.prov" '.provenance.path == $p and
		.provenance.subjects == [{name: "app.bin", sha256: $s}] and
		(.provenance.key_id | length) == 64' "$D/b.json"
	run_isopod verify-artifact --stage t75-tools "$D/app.bin" "$D/app.prov"
	[ "$status" -eq 0 ]
	jq -e --arg s "$sha" --arg sid "$sid" --arg mid "$(cat /etc/machine-id)" --slurpfile r "$D/b.json" \
		--arg l "$(sha256sum <"$ISOPOD_HOME/stages/$sid/layer.qcow2" | cut -c1-64)" \
		--arg b "$(cat "$ISOPOD_HOME/images/current-base")" \
		--arg k "$(jq -r .vmlinux.sha256 "$ISOPOD_HOME/kernels/$(cat "$ISOPOD_HOME/kernels/current")/meta.json")" '
		.valid and .failures == [] and .subject.digest.sha256 == $s and .artifact.sha256 == $s and
		.builder.id == "urn:isopod:builder:" + $mid and
		.buildType == "urn:isopod:buildtype:run:v1" and
		.command == ["cp", "/opt/tool", "/tmp/app"] and .cwd == "/opt" and .stage == "t75-tools" and
		.network == {mode: "none", allow: []} and .ledger == null and .attestation == null and
		.chain.base.sha256 == $b and .chain.kernel.vmlinux == $k and
		.chain.layers == [{stage: $sid, sha256: $l}] and .expected_chain.layers[0].sha256 == $l and
		.accelerator.name == $r[0].accel and .exit.exitCode == 0 and (.timings.bootMs | type) == "number" and
		.invocationId == $r[0].vm.id' <<<"$output"
}

@test "the Statement is in-toto v1 with a SLSA provenance v1 predicate; env names are in it, their values never" {
	payload "$D/base.prov" >"$BATS_TEST_TMPDIR/stmt.json"
	jq -e '._type == "https://in-toto.io/Statement/v1" and
		.predicateType == "https://slsa.dev/provenance/v1" and
		(.predicate.buildDefinition | has("buildType", "externalParameters",
			"internalParameters", "resolvedDependencies")) and
		(.predicate.runDetails.metadata | has("invocationId", "startedOn", "finishedOn")) and
		.predicate.buildDefinition.externalParameters.envNames == ["SECRET"] and
		([.predicate.buildDefinition.resolvedDependencies[].name] ==
			["kernel/vmlinux", "kernel/initramfs", "image/base"])' "$BATS_TEST_TMPDIR/stmt.json"
	jq -e '.payloadType == "application/vnd.in-toto+json"' "$D/base.prov"
	run ! grep -q hunter2 "$BATS_TEST_TMPDIR/stmt.json"
	grep -q SECRET "$BATS_TEST_TMPDIR/stmt.json"
}

@test "a committed stage is a subject too: its layer verifies against the run that made it" {
	local sid
	sid=$(jq -r .commit.stage.id "$D/a.json")
	jq -e --arg n "stage/$sid" '[.provenance.subjects[].name] == ["base.bin", $n]' "$D/a.json"
	run_isopod verify-artifact --stage base "$ISOPOD_HOME/stages/$sid/layer.qcow2" "$D/base.prov"
	[ "$status" -eq 0 ]
	jq -e --arg n "stage/$sid" '.valid and .subject.name == $n and .chain.layers == []' <<<"$output"
	# ... and not against the run that forked it
	run_isopod verify-artifact "$ISOPOD_HOME/stages/$sid/layer.qcow2" "$D/app.prov"
	[ "$status" -eq 1 ]
}

@test "one changed byte of the artifact is refused (exit 1, the subject named)" {
	cp "$D/app.bin" "$BATS_TEST_TMPDIR/app.bin"
	printf 'X' | dd of="$BATS_TEST_TMPDIR/app.bin" bs=1 seek=12 conv=notrunc 2>/dev/null
	[ "$(wc -c <"$BATS_TEST_TMPDIR/app.bin")" = "$(wc -c <"$D/app.bin")" ]
	run_isopod verify-artifact "$BATS_TEST_TMPDIR/app.bin" "$D/app.prov"
	[ "$status" -eq 1 ]
	jq -e '.valid == false and .subject == null and
		([.failures[].field] == ["subject"]) and (.failures[0].why | test("not one of the 1 subject"))' <<<"$output"
	# the control: the artifact as it came out verifies with the same envelope
	run_isopod verify-artifact "$D/app.bin" "$D/app.prov"
	[ "$status" -eq 0 ]
}

@test "a different stage chain is refused: provenance of the same bytes made on another chain" {
	cmp "$D/base.bin" "$D/app.bin" # the same bytes, made on two chains
	run_isopod verify-artifact --stage t75-tools "$D/app.bin" "$D/base.prov"
	[ "$status" -eq 1 ]
	jq -e '.valid == false and ([.failures[].field] | unique) == ["chain"] and
		(.failures[0].why | test("0 stage layer\\(s\\) signed, 1 expected"))' <<<"$output"
	# each envelope verifies against its own chain
	run_isopod verify-artifact --stage base "$D/base.bin" "$D/base.prov"
	[ "$status" -eq 0 ]
	run_isopod verify-artifact --stage base "$D/app.bin" "$D/app.prov"
	[ "$status" -eq 1 ]
	jq -e '[.failures[].field] == ["chain"]' <<<"$output"
}

@test "a tampered chain digest is refused: by the signature, and by the chain when re-signed" {
	local z
	z=$(printf '0%.0s' $(seq 64))
	payload "$D/app.prov" | jq -c --arg z "$z" '.predicate.buildDefinition.resolvedDependencies |=
		map(if (.name | startswith("stage/")) then .digest.sha256 = $z else . end)' \
		>"$BATS_TEST_TMPDIR/p.json"
	jq -c --arg p "$(base64 -w0 <"$BATS_TEST_TMPDIR/p.json")" '.payload = $p' "$D/app.prov" \
		>"$BATS_TEST_TMPDIR/t.prov"
	run_isopod verify-artifact --stage t75-tools "$D/app.bin" "$BATS_TEST_TMPDIR/t.prov"
	[ "$status" -eq 1 ]
	jq -e '.valid == false and [.failures[].field] == ["signatures"]' <<<"$output"
	# signed again with the host's own key (what only its holder can do),
	# the signature holds and the chain still gives it away
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" envelope "$ISOPOD_ATTEST_DIR/key" \
		"$BATS_TEST_TMPDIR/p.json" >"$BATS_TEST_TMPDIR/r.prov"
	run_isopod verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/r.prov"
	[ "$status" -eq 0 ]
	run_isopod verify-artifact --stage t75-tools "$D/app.bin" "$BATS_TEST_TMPDIR/r.prov"
	[ "$status" -eq 1 ]
	jq -e --arg z "$z" '[.failures[].field] == ["chain"] and .chain.layers[0].sha256 == $z' <<<"$output"
}

@test "another key is refused: the host key does not verify an envelope signed by another, nor the other key this host's" {
	local id
	id=$(jq -r .vm.id "$D/b.json")
	# The same run signed with the other key (the tool alone, from the run's
	# saved result and its VM record).
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --dir "$D/keys2" --vm "$id" \
		--result "$D/b.json" -o "$BATS_TEST_TMPDIR/other.prov" -- cp /opt/tool /tmp/app
	[ "$status" -eq 0 ]
	jq -e --slurpfile b "$D/b.json" '.key_id != $b[0].provenance.key_id' <<<"$output"
	run_isopod verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/other.prov"
	[ "$status" -eq 1 ]
	jq -e '.valid == false and [.failures[].field] == ["signatures"] and .subject == null' <<<"$output"
	run_isopod verify-artifact --key "$D/keys2/key.pub" "$D/app.bin" "$D/app.prov"
	[ "$status" -eq 1 ]
	jq -e '[.failures[].field] == ["signatures"]' <<<"$output"
	# the control: each with its own key
	run_isopod verify-artifact --key "$D/keys2/key.pub" "$D/app.bin" "$BATS_TEST_TMPDIR/other.prov"
	[ "$status" -eq 0 ]
}

@test "interop: the envelope verifies with an independent DSSE implementation (python3-securesystemslib)" {
	run "$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" verify "$D/app.prov" "$ISOPOD_ATTEST_DIR/key.pub"
	[ "$status" -eq 0 ]
	[ "$output" = "$(payload "$D/app.prov")" ]
	jq -e '.predicateType == "https://slsa.dev/provenance/v1"' <<<"$output"
	# ... and refuses what it must: the other key, a flipped signature
	run "$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" verify "$D/app.prov" "$D/keys2/key.pub"
	[ "$status" -eq 1 ]
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" flip "$D/app.prov" sig >"$BATS_TEST_TMPDIR/bad.prov"
	run "$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" verify "$BATS_TEST_TMPDIR/bad.prov" \
		"$ISOPOD_ATTEST_DIR/key.pub"
	[ "$status" -eq 1 ]
	run_isopod verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/bad.prov"
	[ "$status" -eq 1 ]
}

@test "the host attestation in force is named by its digest (and whether it verified at signing)" {
	local id
	id=$(jq -r .vm.id "$D/b.json")
	# not a valid attestation of this host: signed, but over no doctor report
	echo '{"_type":"https://in-toto.io/Statement/v1"}' >"$BATS_TEST_TMPDIR/s.json"
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" envelope "$ISOPOD_ATTEST_DIR/key" \
		"$BATS_TEST_TMPDIR/s.json" >"$BATS_TEST_TMPDIR/att.json"
	# given through a FIFO, whose bytes can be read once: the digest and the
	# verdict are of that one read (a second read, by path, would wait for
	# a writer that is gone: bounded, 124)
	mkfifo "$BATS_TEST_TMPDIR/att.fifo"
	# shellcheck disable=SC2016 # expanded by the inner sh
	timeout 60 sh -c 'cat "$1" >"$2"' sh "$BATS_TEST_TMPDIR/att.json" "$BATS_TEST_TMPDIR/att.fifo" &
	run --separate-stderr timeout 60 "$ISOPOD_SRC/bin/isopod-provenance" sign --attestation \
		"$BATS_TEST_TMPDIR/att.fifo" --vm "$id" --result "$D/b.json" -o "$BATS_TEST_TMPDIR/a.prov" -- \
		cp /opt/tool /tmp/app
	wait
	echo "$stderr"
	[ "$status" -eq 0 ]
	run_isopod verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/a.prov"
	[ "$status" -eq 0 ]
	jq -e --arg s "$(sha256sum <"$BATS_TEST_TMPDIR/att.json" | cut -c1-64)" \
		'.attestation.sha256 == $s and .attestation.valid == false' <<<"$output"
	# --require-attestation: one that did not verify at signing is refused,
	# and so is a statement with none in force (app.prov's)
	run_isopod -1 verify-artifact --require-attestation "$D/app.bin" "$BATS_TEST_TMPDIR/a.prov"
	jq -e '[.failures[].field] == ["attestation"] and (.failures[0].why | test("did not verify"))' <<<"$output"
	run_isopod -1 verify-artifact --require-attestation "$D/app.bin" "$D/app.prov"
	jq -e '[.failures[].field] == ["attestation"] and (.failures[0].why | test("no host attestation"))' <<<"$output"
	# a named attestation that is not there is an error, not "none"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --attestation "$BATS_TEST_TMPDIR/nope" \
		--vm "$id" --result "$D/b.json" -o "$BATS_TEST_TMPDIR/n.prov" -- cp /opt/tool /tmp/app
	[ "$status" -eq 101 ]
	[ ! -e "$BATS_TEST_TMPDIR/n.prov" ]
}

@test "verify-artifact --kernel: the run's kernel by file or digest verifies; another is refused (chain.kernel)" {
	local kd k
	kd="$ISOPOD_HOME/kernels/$(cat "$ISOPOD_HOME/kernels/current")"
	k=$(jq -r .vmlinux.sha256 "$kd/meta.json")
	run_isopod -0 verify-artifact --kernel "$kd/vmlinux" "$D/app.bin" "$D/app.prov"
	jq -e '.valid and .failures == []' <<<"$output"
	run_isopod -0 verify-artifact --kernel "$k" "$D/app.bin" "$D/app.prov"
	run_isopod -1 verify-artifact --kernel "$(sha256sum <"$D/app.bin" | cut -c1-64)" "$D/app.bin" "$D/app.prov"
	jq -e --arg k "$k" '[.failures[].field] == ["chain.kernel"] and (.failures[0].why | endswith($k))' <<<"$output"
	run_isopod -1 verify-artifact --kernel "$kd/initramfs.cpio" "$D/app.bin" "$D/app.prov"
	run_isopod -101 verify-artifact --kernel "$BATS_TEST_TMPDIR/nope" "$D/app.bin" "$D/app.prov"
}

@test "sign refuses a copied-out file that changed since the run (exit 1, nothing written)" {
	local id
	id=$(jq -r .vm.id "$D/b.json")
	cp "$D/app.bin" "$BATS_TEST_TMPDIR/app.bin"
	jq --arg h "$BATS_TEST_TMPDIR/app.bin" '.copied_out[0].host = $h' "$D/b.json" >"$BATS_TEST_TMPDIR/r.json"
	echo more >>"$BATS_TEST_TMPDIR/app.bin"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/r.json" -o "$BATS_TEST_TMPDIR/c.prov" -- cp /opt/tool /tmp/app
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[[ "$stderr" == *"changed since the run copied it"* ]]
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
}

@test "--provenance is refused before anything boots: no --copy-out, --keep, no host key" {
	local n
	n=$(nvms)
	run_isopod -100 run --provenance "$BATS_TEST_TMPDIR/p" -- true
	[[ "$stderr" == *"--provenance signs what --copy-out brings back (and a --commit-as stage)"* ]]
	run_isopod -100 run --keep --copy-out /a:/tmp/a --provenance "$BATS_TEST_TMPDIR/p" -- true
	[[ "$stderr" == *"cannot be combined with --keep"* ]]
	ISOPOD_ATTEST_DIR="$BATS_TEST_TMPDIR/nokeys" run_isopod -101 run --copy-out "/a:$BATS_TEST_TMPDIR/a" \
		--provenance "$BATS_TEST_TMPDIR/p" -- true
	jq -e '.ok == false and .error_kind == "not_found"' <<<"$output"
	[[ "$stderr" == *"nokeys"* ]]
	# a directory --copy-in: a tree has no sha256 to name it by
	mkdir "$BATS_TEST_TMPDIR/tree"
	run_isopod -100 run --copy-in "$BATS_TEST_TMPDIR/tree:/t" --copy-out "/a:$BATS_TEST_TMPDIR/a" \
		--provenance "$BATS_TEST_TMPDIR/p" -- true
	[[ "$stderr" == *"a directory; --provenance signs regular-file inputs only"* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/p" ]
	[ "$(nvms)" = "$n" ]
}

@test "sign refuses a copy-in without a sha256 (a directory), never leaves it out; and a directory copy-out whose files were not listed" {
	local id
	id=$(jq -r .vm.id "$D/b.json")
	jq '.copied_in += [{host: "/h/tree", guest: "/root/tree", bytes: 10, tree: true}]' "$D/b.json" \
		>"$BATS_TEST_TMPDIR/r.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/r.json" -o "$BATS_TEST_TMPDIR/c.prov" -- cp /opt/tool /tmp/app
	[ "$status" -eq 1 ] && [ -z "$output" ] || false
	[[ "$stderr" == *"copy-in /root/tree has no sha256"*"nothing is signed"* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	# a directory copy-out whose files exec did not list (past its
	# bounds): refused, never signed in part
	jq '.copied_out += [{host: "/h/out", guest: "/root/out", bytes: 10, tree: true, skipped: []}]' \
		"$D/b.json" >"$BATS_TEST_TMPDIR/r.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/r.json" -o "$BATS_TEST_TMPDIR/c.prov" -- cp /opt/tool /tmp/app
	[ "$status" -eq 1 ] && [ -z "$output" ] || false
	[[ "$stderr" == *"copy-out /root/out is a directory whose files were not listed"*"nothing is signed"* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
}

@test "a directory copy-out is signed file by file: each regular file a subject TOP/PATH that verifies, each symlink a byproduct; a file or symlink changed, or reached through a symlink, is refused" {
	local t="$BATS_TEST_TMPDIR/tree" id sa sb
	run_isopod run --json-only --copy-out "/root/tree:$t" --provenance "$BATS_TEST_TMPDIR/t.prov" -- \
		sh -c 'mkdir -p /root/tree/sub && echo one >/root/tree/a && echo two >/root/tree/sub/b && ln -s a /root/tree/l'
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$BATS_TEST_TMPDIR/t.json"
	id=$(jq -r .vm.id "$BATS_TEST_TMPDIR/t.json")
	sa=$(sha256sum <"$t/a" | cut -c1-64)
	sb=$(sha256sum <"$t/sub/b" | cut -c1-64)
	# exec listed the tree's regular files by the digest of what arrived
	jq -e --arg a "$sa" --arg b "$sb" '.copied_out[0].tree and
		(.copied_out[0].files | sort_by(.path)) == [{path: "a", sha256: $a, bytes: 4},
							    {path: "sub/b", sha256: $b, bytes: 4}]' \
		"$BATS_TEST_TMPDIR/t.json"
	# and its symlink by its target (review L5)
	jq -e '.copied_out[0].symlinks == [{path: "l", target: "a"}]' "$BATS_TEST_TMPDIR/t.json"
	payload "$BATS_TEST_TMPDIR/t.prov" | jq -e '[.predicate.runDetails.byproducts[] |
		select(.name == "tree/l")] == [{name: "tree/l", content: "YQ==", mediaType: "inode/symlink",
		annotations: {isopod_guest: "/root/tree/l", isopod_symlink: "a"}}] and
		([.subject[].name] | index("tree/l") == null)'
	jq -e --arg a "$sa" --arg b "$sb" '.ok and (.provenance.subjects | sort_by(.name)) ==
		[{name: "tree/a", sha256: $a}, {name: "tree/sub/b", sha256: $b}]' "$BATS_TEST_TMPDIR/t.json"
	payload "$BATS_TEST_TMPDIR/t.prov" | jq -e '[.subject[] | select(.name == "tree/sub/b") |
		.annotations.isopod_guest] == ["/root/tree/sub/b"]'
	run_isopod verify-artifact "$t/sub/b" "$BATS_TEST_TMPDIR/t.prov"
	[ "$status" -eq 0 ]
	jq -e '.valid and .subject.name == "tree/sub/b"' <<<"$output"
	# the directory itself verifies: each file by its digest, its symlink
	# by its target (a trailing slash the same); a file added, one
	# missing, the symlink retargeted, made a file or gone: refused, each
	# named (field tree)
	run_isopod verify-artifact "$t/" "$BATS_TEST_TMPDIR/t.prov"
	[ "$status" -eq 0 ]
	jq -e --arg t "$t/" '.valid and .artifact == {path: $t, tree: {files: 2, symlinks: 1}} and
		.subject == null and .failures == []' <<<"$output"
	# a symlink to the tree, with a trailing slash or not, is not followed
	# (review L1: lstat("link/") reports the directory it names)
	ln -s tree "$BATS_TEST_TMPDIR/link"
	for l in link link/; do
		run_isopod -1 verify-artifact "$BATS_TEST_TMPDIR/$l" "$BATS_TEST_TMPDIR/t.prov"
		[ -z "$output" ] && [[ "$stderr" == *"/link is a symlink to a directory: not followed"* ]] || false
	done
	rm "$BATS_TEST_TMPDIR/link"
	tree_refused() {
		run_isopod -1 verify-artifact "$t" "$BATS_TEST_TMPDIR/t.prov"
		jq -e --arg w "$1" '.valid == false and ([.failures[] | select(.field == "tree") | .why] |
			length == 1 and (.[0] | startswith($w)))' <<<"$output"
	}
	echo new >"$t/sub/new"
	tree_refused "tree/sub/new: not recorded in the Statement"
	rm "$t/sub/new"
	# a name that is not UTF-8: refused by name (U+FFFD for its byte),
	# never a verify that fails to write its report (review L3)
	: >"$t/sub/$(printf 'bad\377')"
	tree_refused "tree/sub/bad$(printf '\357\277\275'): not recorded in the Statement"
	rm "$t/sub/$(printf 'bad\377')"
	mv "$t/a" "$BATS_TEST_TMPDIR/a.moved"
	tree_refused "tree/a: the file signed is missing"
	mv "$BATS_TEST_TMPDIR/a.moved" "$t/a"
	echo changed >"$t/sub/b"
	tree_refused "tree/sub/b: its sha256 is not the one signed"
	echo two >"$t/sub/b"
	ln -sfn sub "$t/l"
	tree_refused "tree/l: a symlink to another target"
	rm "$t/l"
	echo a >"$t/l"
	tree_refused "tree/l: not a symlink, as signed"
	rm "$t/l"
	tree_refused "tree/l: the symlink signed is missing"
	ln -s a "$t/l"
	# a directory the Statement names nothing under (field subject)
	run_isopod -1 verify-artifact "$t/sub" "$BATS_TEST_TMPDIR/t.prov"
	jq -e '[.failures[].field] == ["subject"]' <<<"$output"
	# a hostile tree costs no more than the cap (review M1): 70 files
	# nobody signed give 64 failures, one "and more", and the walk stops
	mkdir "$t/many"
	for i in $(seq 70); do : >"$t/many/f$i"; done
	run_isopod -1 verify-artifact "$t" "$BATS_TEST_TMPDIR/t.prov"
	jq -e '.valid == false and ([.failures[] | select(.field == "tree")] | length == 65 and
		(.[64].why | test("and more not listed")))' <<<"$output"
	rm -r "$t/many"
	# a directory verify cannot enter (review M2: root without
	# CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH, a mode-000 directory) holding a
	# file nobody signed: refused, never valid on what it could see
	mkdir "$t/sub/locked"
	echo x >"$t/sub/locked/f"
	chmod 000 "$t/sub/locked"
	run --separate-stderr setpriv --bounding-set=-dac_override,-dac_read_search \
		"$ISOPOD_SRC/sh/isopod" verify-artifact "$t" "$BATS_TEST_TMPDIR/t.prov"
	chmod 755 "$t/sub/locked"
	rm -r "$t/sub/locked"
	[ "$status" -eq 1 ]
	jq -e '.valid == false and ([.failures[] | select(.field == "tree") | .why] ==
		["tree/sub/locked: Permission denied: not all of the directory visited"])' <<<"$output"
	# sub made a symlink to a directory holding the same bytes: not
	# followed, nothing signed
	mv "$t/sub" "$t/sub.real"
	ln -s sub.real "$t/sub"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/t.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 1 ] && [ -z "$output" ] || false
	[[ "$stderr" == *"tree/sub/b"*"not followed through a symlink"* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	rm "$t/sub"
	mv "$t/sub.real" "$t/sub"
	# one file changed since the run copied it: nothing signed
	echo changed >"$t/a"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/t.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 1 ] && [ -z "$output" ] || false
	[[ "$stderr" == *"tree/a changed since the run copied it"* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	echo one >"$t/a"
	# sub now a file: the real errno is said, no symlink claimed
	mv "$t/sub" "$t/sub.real"
	echo x >"$t/sub"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/t.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 1 ] && [[ "$stderr" == *"tree/sub/b (nothing signed): Not a directory"* ]] || false
	[[ "$stderr" != *symlink* ]] || false
	rm "$t/sub"
	mv "$t/sub.real" "$t/sub"
	# the symlink pointed elsewhere, or gone: nothing signed; a result
	# that lists files without symlinks (an older exec): nothing signed
	ln -sfn sub "$t/l"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/t.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 1 ] && [[ "$stderr" == *"symlink $t/l changed since the run copied it (to a; now another target)"* ]] || false
	# no longer a symlink: changed (1); gone: 101 as a file gone is
	# (review LOW-5)
	rm "$t/l"
	echo a >"$t/l"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/t.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 1 ] && [[ "$stderr" == *"symlink $t/l changed"*"now not a symlink"* ]] || false
	rm "$t/l"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/t.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 101 ] && [[ "$stderr" == *"unable to read the copied-out symlink $t/l (nothing signed): No such file"* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	ln -s a "$t/l"
	jq 'del(.copied_out[0].symlinks)' "$BATS_TEST_TMPDIR/t.json" >"$BATS_TEST_TMPDIR/old.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/old.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 100 ] && [[ "$stderr" == *"files listed without its symlinks"* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	# a file of the tree the signer cannot open (EACCES; the tests run as
	# root, so as root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH, the
	# file nobody's 0600): the host's failure, 111, said as it is
	chown 65534 "$t/sub/b"
	chmod 0600 "$t/sub/b"
	run --separate-stderr setpriv --bounding-set=-dac_override,-dac_read_search \
		"$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/t.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 111 ] && [[ "$stderr" == *"tree/sub/b (nothing signed): Permission denied"* ]] || false
	[[ "$stderr" != *symlink* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	chown 0 "$t/sub/b"
	chmod 0644 "$t/sub/b"
	# two copy-outs whose subjects share names (one name in two
	# directories: their paths are the guest's), or a tree named stage
	# (stage/ is the commit's): nothing signed
	mkdir "$BATS_TEST_TMPDIR/two"
	cp -a "$t" "$BATS_TEST_TMPDIR/two/tree"
	cp -a "$t" "$BATS_TEST_TMPDIR/stage"
	jq --arg h "$BATS_TEST_TMPDIR/two/tree" '.copied_out += [.copied_out[0] | .host = $h]' \
		"$BATS_TEST_TMPDIR/t.json" >"$BATS_TEST_TMPDIR/dup.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/dup.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 100 ] && [[ "$stderr" == *"two subjects would be named tree/"* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	# review LOW-1: a file of one tree and a symlink of another, or two
	# symlinks, of one name (the symlinks are byproducts): nothing signed
	mkdir -p "$BATS_TEST_TMPDIR/fl/tree" "$BATS_TEST_TMPDIR/ll/tree"
	cp "$t/a" "$BATS_TEST_TMPDIR/fl/tree/l"
	ln -s a "$BATS_TEST_TMPDIR/ll/tree/l"
	jq --arg h "$BATS_TEST_TMPDIR/fl/tree" --arg a "$sa" '.copied_out += [{guest: "/root/o/tree",
		host: $h, bytes: 4, tree: true, skipped: [], files: [{path: "l", sha256: $a, bytes: 4}],
		symlinks: []}]' "$BATS_TEST_TMPDIR/t.json" >"$BATS_TEST_TMPDIR/fl.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/fl.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 100 ] && [[ "$stderr" == *"a subject and a symlink would be named tree/l "* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	jq --arg h "$BATS_TEST_TMPDIR/ll/tree" '.copied_out += [{guest: "/root/o/tree", host: $h,
		bytes: 0, tree: true, skipped: [], files: [], symlinks: [{path: "l", target: "a"}]}]' \
		"$BATS_TEST_TMPDIR/t.json" >"$BATS_TEST_TMPDIR/ll.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/ll.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 100 ] && [[ "$stderr" == *"two symlinks would be named tree/l "* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	jq --arg h "$BATS_TEST_TMPDIR/stage" '.copied_out[0].host = $h' \
		"$BATS_TEST_TMPDIR/t.json" >"$BATS_TEST_TMPDIR/stage.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/stage.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 100 ] && [[ "$stderr" == *"subject would be named stage/"*"names a committed stage"* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	# a tree named stage holding a symlink alone: the byproduct's name is refused as a subject's
	mkdir -p "$BATS_TEST_TMPDIR/ls/stage"
	ln -s a "$BATS_TEST_TMPDIR/ls/stage/l"
	jq --arg h "$BATS_TEST_TMPDIR/ls/stage" '.copied_out = [{guest: "/root/o/stage", host: $h,
		bytes: 0, tree: true, skipped: [], files: [], symlinks: [{path: "l", target: "a"}]}]' \
		"$BATS_TEST_TMPDIR/t.json" >"$BATS_TEST_TMPDIR/ls.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/ls.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 100 ] && [[ "$stderr" == *"symlink would be named stage/l:"*"names a committed stage"* ]] || false
	[ ! -e "$BATS_TEST_TMPDIR/c.prov" ]
	# the tree as the run left it signs
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" \
		--result "$BATS_TEST_TMPDIR/t.json" -o "$BATS_TEST_TMPDIR/c.prov" -- sh -c x
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
}

@test "verify-artifact's exit statuses: 101 a missing file, 1 a garbage envelope, 100 usage" {
	run_isopod -101 verify-artifact "$BATS_TEST_TMPDIR/nope" "$D/app.prov"
	run_isopod -101 verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/nope"
	printf '{"payload": 1' >"$BATS_TEST_TMPDIR/g.prov"
	run_isopod -1 verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/g.prov"
	jq -e '.valid == false and [.failures[].field] == ["envelope"]' <<<"$output"
	run_isopod -100 verify-artifact "$D/app.bin"
	run_isopod -101 verify-artifact --stage no-such-stage "$D/app.bin" "$D/app.prov"
}

@test "verify-artifact of a FILE whose name is not UTF-8: its bytes checked as under any name (a file is its digest), the report's path made UTF-8; changed, missing, or a directory of such a name, and a missing PROVENANCE of such a name: refused cleanly" {
	local f="$BATS_TEST_TMPDIR/app"$'\xff\xfe'".bin" d="$BATS_TEST_TMPDIR/tr"$'\xff'
	cp "$D/app.bin" "$f"
	run_isopod -0 verify-artifact "$f" "$D/app.prov"
	jq -e '.valid == true and (.artifact.path | endswith("/app\ufffd\ufffd.bin")) and .failures == []' <<<"$output"
	printf 'x' >>"$f"
	run_isopod -1 verify-artifact "$f" "$D/app.prov"
	jq -e '.valid == false and (.artifact.path | endswith("/app\ufffd\ufffd.bin")) and
		([.failures[].field] | index("subject"))' <<<"$output"
	rm "$f"
	run_isopod -101 verify-artifact "$f" "$D/app.prov"
	# its name quoted in the diagnostic (EXC: \xHH for a byte that is not text)
	# (the name alone: BATS_TEST_TMPDIR may hold bytes EXC quotes too)
	[ -z "$output" ] && [[ "$stderr" == *"unable to read "*'/app\xff\xfe.bin: No such file'* ]] || false
	# and PROVENANCE's name likewise
	run_isopod -101 verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/p"$'\xff'".prov"
	[ -z "$output" ] && [[ "$stderr" == *"unable to read "*'/p\xff.prov: No such file'* ]] || false
	# a directory of such a name: its Statement records nothing under it
	# (a Statement's names are UTF-8): refused, the failure kept
	mkdir "$d"
	cp "$D/app.bin" "$d/app.bin"
	run_isopod -1 verify-artifact "$d" "$D/app.prov"
	jq -e '.valid == false and (.artifact.path | endswith("/tr\ufffd")) and
		([.failures[].field] | index("subject"))' <<<"$output"
}

# A result of run B's VM as a failed run would have it: exit_code and
# timed_out set (isopod-exec exits 1 for both, and copies out).
failed_result() {
	jq --argjson c "$1" --argjson t "$2" '.exit_code = $c | .timed_out = $t' "$D/b.json" >"$3"
}

@test "a failed or timed-out run's provenance is signed but does not verify (field exit) unless --allow-failed" {
	local id
	id=$(jq -r .vm.id "$D/b.json")
	failed_result 3 false "$BATS_TEST_TMPDIR/r3.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" --result "$BATS_TEST_TMPDIR/r3.json" \
		-o "$BATS_TEST_TMPDIR/f.prov" -- sh -c 'cp /opt/tool /tmp/app; exit 3'
	[ "$status" -eq 0 ]
	run_isopod -1 verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/f.prov"
	jq -e '.valid == false and [.failures[].field] == ["exit"] and .exit.exitCode == 3 and
		(.failures[0].why | test("exitCode 3")) and .subject.name == "app.bin"' <<<"$output"
	run_isopod verify-artifact --allow-failed "$D/app.bin" "$BATS_TEST_TMPDIR/f.prov"
	jq -e '.valid and .failures == [] and .exit.exitCode == 3' <<<"$output"
	# killed by --timeout-s: 137 and timedOut
	failed_result 137 true "$BATS_TEST_TMPDIR/rt.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" --result "$BATS_TEST_TMPDIR/rt.json" \
		-o "$BATS_TEST_TMPDIR/t.prov" -- cp /opt/tool /tmp/app
	[ "$status" -eq 0 ]
	run_isopod -1 verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/t.prov"
	jq -e '.valid == false and [.failures[].field] == ["exit"] and .exit.timedOut == true' <<<"$output"
	# exit 0 but timed out is still a timeout
	failed_result 0 true "$BATS_TEST_TMPDIR/r0.json"
	"$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" --result "$BATS_TEST_TMPDIR/r0.json" \
		-o "$BATS_TEST_TMPDIR/z.prov" -- cp /opt/tool /tmp/app >/dev/null
	run_isopod -1 verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/z.prov"
	jq -e '[.failures[].field] == ["exit"]' <<<"$output"
}

@test "sign refuses a VM that is running (its lock held) or not stopped (exit 102, the VM named, nothing written)" {
	local id m
	id=$(jq -r .vm.id "$D/b.json")
	hold_lock "$ISOPOD_HOME/vms/$id/lock"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" --result "$D/b.json" \
		-o "$BATS_TEST_TMPDIR/r.prov" -- cp /opt/tool /tmp/app
	kill "$holder"
	wait "$holder" 2>/dev/null || true
	[ "$status" -eq 102 ]
	[ -z "$output" ]
	[[ "$stderr" == *"vm $id is running"* ]]
	[ ! -e "$BATS_TEST_TMPDIR/r.prov" ]
	# a record that does not say stopped (the lock free): refused too
	m=$ISOPOD_HOME/vms/$id/meta.json
	cp "$m" "$BATS_TEST_TMPDIR/meta.json"
	jq '.state = "running"' "$BATS_TEST_TMPDIR/meta.json" >"$m"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" --result "$D/b.json" \
		-o "$BATS_TEST_TMPDIR/r.prov" -- cp /opt/tool /tmp/app
	cp "$BATS_TEST_TMPDIR/meta.json" "$m"
	[ "$status" -eq 102 ]
	[[ "$stderr" == *"vm $id is in state running"* ]]
	[ ! -e "$BATS_TEST_TMPDIR/r.prov" ]
	# the control: stopped, it signs
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" --result "$D/b.json" \
		-o "$BATS_TEST_TMPDIR/r.prov" -- cp /opt/tool /tmp/app
	[ "$status" -eq 0 ]
}

@test "stdin is in the Statement: a --stdin-file by its digest and size, none as null, a pipe said to be unrecorded" {
	local id
	id=$(jq -r .vm.id "$D/b.json")
	payload "$D/app.prov" | jq -e --arg s "$(sha256sum <"$D/build.sh" | cut -c1-64)" \
		--argjson n "$(wc -c <"$D/build.sh")" \
		'.predicate.buildDefinition.externalParameters.stdin == {sha256: $s, bytes: $n}'
	run_isopod verify-artifact "$D/app.bin" "$D/app.prov"
	jq -e --arg s "$(sha256sum <"$D/build.sh" | cut -c1-64)" '.stdin.sha256 == $s' <<<"$output"
	payload "$D/base.prov" | jq -e '.predicate.buildDefinition.externalParameters | has("stdin") and .stdin == null'
	"$ISOPOD_SRC/bin/isopod-provenance" sign --vm "$id" --result "$D/b.json" --stdin-pipe \
		-o "$BATS_TEST_TMPDIR/p.prov" -- sh -s >/dev/null
	run_isopod verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/p.prov"
	jq -e '.valid and .stdin == "pipe, not recorded" and .command == ["sh", "-s"]' <<<"$output"
	# a Statement without stdin (signed with the host key) is refused
	payload "$D/app.prov" | jq -c 'del(.predicate.buildDefinition.externalParameters.stdin)' \
		>"$BATS_TEST_TMPDIR/n.json"
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" envelope "$ISOPOD_ATTEST_DIR/key" \
		"$BATS_TEST_TMPDIR/n.json" >"$BATS_TEST_TMPDIR/n.prov"
	run_isopod -1 verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/n.prov"
	jq -e '[.failures[].field] == ["externalParameters.stdin"]' <<<"$output"
}

@test "a validly signed envelope of another payloadType is refused, and so is an attestation envelope" {
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" resign "$D/app.prov" "$ISOPOD_ATTEST_DIR/key" \
		application/json >"$BATS_TEST_TMPDIR/j.prov"
	run "$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" verify "$BATS_TEST_TMPDIR/j.prov" "$ISOPOD_ATTEST_DIR/key.pub"
	[ "$status" -eq 0 ] # the signature holds
	run_isopod -1 verify-artifact "$D/app.bin" "$BATS_TEST_TMPDIR/j.prov"
	jq -e '.valid == false and [.failures[].field] == ["payloadType"] and .subject == null' <<<"$output"
	# the host attestation (isopod-attest's, signed by its key): not provenance
	printf 'x' >"$BATS_TEST_TMPDIR/any"
	run_isopod -1 verify-artifact --key "$BATS_TEST_DIRNAME/attest/golden/key.pub" "$BATS_TEST_TMPDIR/any" \
		"$BATS_TEST_DIRNAME/attest/golden/envelope.json"
	jq -e '.valid == false and ([.failures[].field] | index("predicateType") and index("signatures") == null)' <<<"$output"
}
