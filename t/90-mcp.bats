#!/usr/bin/env bats
# isopod-mcp (issue 11): the MCP server, driven by the official SDK client
# (t/mcp/client.mjs, @modelcontextprotocol/sdk pinned in t/mcp/package.json;
# .ci/setup runs `npm ci` there) and, for traffic no SDK sends, byte by
# byte (t/mcp/raw.py).  Few VM boots: every run is --net none and warm.

load helpers

setup_file() {
	# One flavor: an attestation's subjects hash every base image
	export ISOPOD_FLAVORS=base
	isopod_setup_file --images
	# MCP_SERVER: another build (a mutant, by hand: see the report)
	MCP=${MCP_SERVER:-$ISOPOD_SRC/bin/isopod-mcp}
	MCP_SERVER=$MCP
	CLIENT="$ISOPOD_SRC/t/mcp/client.mjs"
	RAW="$ISOPOD_SRC/t/mcp/raw.py"
	IO="$(mktemp -d /tmp/isopod-t90-io.XXXXXX)"
	export MCP MCP_SERVER CLIENT RAW IO
	[ -d "$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk" ] || {
		echo "# t/mcp/node_modules missing: run sh .ci/setup (npm ci in t/mcp)" >&3
		return 1
	}
	mkdir "$IO/sub" "$IO/outside"
	printf 'hello-in\n' >"$IO/sub/in.txt"
	printf 'fed-from-file\n' >"$IO/sub/stdin.txt"
	printf 'secret\n' >"$IO/outside/secret"
	# The I/O root is $IO/sub; $IO/outside is not beneath it.
	ln -s ../outside "$IO/sub/link-out"
	ln -s ../outside/secret "$IO/sub/secret-link"
	ln -s in.txt "$IO/sub/link-in"
	# A directory for copy_in: its links lead out of the I/O root (relative,
	# absolute; a hard link to a file outside), a FIFO, an empty dir.
	mkdir -p "$IO/sub/tree/dir" "$IO/sub/tree/empty"
	printf 'in-tree\n' >"$IO/sub/tree/dir/f"
	ln -s ../../outside/secret "$IO/sub/tree/esc"
	ln -s "$IO/outside/secret" "$IO/sub/tree/abs"
	printf 'hard\n' >"$IO/outside/hard"
	ln "$IO/outside/hard" "$IO/sub/tree/hl"
	mkfifo "$IO/sub/tree/fifo"
}

teardown_file() {
	rm -rf "$IO"
	isopod_teardown_file
}

# shellcheck disable=SC2154  # $stderr is set by bats' run
# client SCENARIO [JSON]: the SDK driver against a server whose I/O root
# is $IO/sub, its one-line JSON in $output.
client() {
	MCP_ARGS="[\"--io-root\",\"$IO/sub\"${MCP_EXTRA:-}]" run --separate-stderr \
		node "$CLIENT" "$@"
	[ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
}

# call TOOL ARGS_JSON
call() {
	client call "{\"name\":\"$1\",\"args\":$2}"
}

# A refusal before anything booted: -32602, naming FIELD, and no VM record.
refused() {
	local n0
	n0=$(isopod vm ls | wc -l)
	call "$1" "$2"
	echo "$output" | jq -e --arg f "$3" '.error.code == -32602 and (.error.message | contains($f))'
	[ "$(isopod vm ls | wc -l)" -eq "$n0" ]
}

INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}'

@test "mcp: -h prints the man page's SYNOPSIS; a bad option is a usage error" {
	run "$MCP" -h
	[ "$status" -eq 0 ]
	syn=$(sed -n '/^\.Sh SYNOPSIS/,/^\.Sh DESCRIPTION/p' "$ISOPOD_SRC/man/isopod-mcp.1" |
		grep -E '^\.(Nm|Op)' | tr '\n' ' ')
	for o in --io-root --max-concurrent --line-max; do
		[[ "$output" == *"$o"* ]] && [[ "$syn" == *"${o#--}"* ]] || false
	done
	run "$MCP" --max-concurrent 0 </dev/null
	[ "$status" -eq 100 ]
	run "$MCP" --io-root /nonexistent </dev/null
	[ "$status" -eq 100 ]
}

@test "mcp: --max-concurrent's default is the CPUs, and no more than the available memory holds at a default VM each" {
	local mi="$BATS_TEST_TMPDIR/meminfo" cpus
	cpus=$(getconf _NPROCESSORS_ONLN)
	# 1 GiB available of 2: one default VM (512 + 256 + 256 MiB for TCG) fits
	printf 'MemTotal:        2097152 kB\nMemAvailable:    1048576 kB\n' >"$mi"
	run --separate-stderr env ISOPOD_MEMINFO="$mi" "$MCP" </dev/null
	[ "$status" -eq 0 ] && [[ "$stderr" == *"at most 1 calls at once (the default; $cpus CPUs, 1024 MiB available)"* ]] || false
	# plenty of memory: the CPUs bind
	printf 'MemTotal:        67108864 kB\nMemAvailable:    67108864 kB\n' >"$mi"
	run --separate-stderr env ISOPOD_MEMINFO="$mi" "$MCP" </dev/null
	[[ "$stderr" == *"at most $cpus calls at once (the default;"* ]]
	# the option wins
	run --separate-stderr env ISOPOD_MEMINFO="$mi" "$MCP" --max-concurrent 5 </dev/null
	[[ "$stderr" == *"at most 5 calls at once (--max-concurrent;"* ]]
}

@test "mcp: the SDK client initializes and lists every tool with input and output schemas" {
	client init
	echo "$output" | jq -e '.server.name == "isopod-mcp" and .capabilities.tools != null and .capabilities.logging != null'
	for t in sandbox_run vm_exec vm_list vm_stop vm_rm stage_list stage_info stage_rm stage_flatten \
		warm_list warm_rm image_list gc doctor_status; do
		echo "$output" | jq -e --arg t "$t" '.tools[] | select(.name == $t) | .input == "object" and .output == "object"'
	done
}

@test "mcp: sandbox_run's outputSchema types every member of isopod run's result (isopod(1) JSON RESULT), none but ok required" {
	run --separate-stderr python3 "$RAW" --want 2 --timeout 30 -- "$MCP" <<EOF
$INIT
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
EOF
	[ "$status" -eq 0 ]
	local out
	out=$(echo "$output" | jq -c '.messages[] | select(.id == 2) | .result.tools[] | select(.name == "sandbox_run") | .outputSchema')
	echo "$out" >&2
	# the man page's members, each with a type (the SDK client checks every answer against it)
	local m
	for m in ok error error_kind vm accel accel_reason tsc_khz path resume_ms warm_key exit_code signal timed_out \
		stdout stderr stdout_bytes stderr_bytes stdout_truncated stderr_truncated stdout_log stderr_log \
		copied_in copied_out warnings on commit provenance net egress limits timings; do
		echo "$out" | jq -e --arg m "$m" '.properties[$m].type != null' >/dev/null ||
			{ echo "untyped: $m"; false; }
	done
	echo "$out" | jq -e '.required == ["ok"] and .properties.stdout_bytes.type == "integer"
		and .properties.timings.properties.total_ms.type == ["integer", "null"]'
	# path's enum is the man page's list (a pooled run's "pool" once missed it)
	local paths
	paths=$(sed -n '/^\.It Cm path$/,/^\.It /p' "$ISOPOD_SRC/man/isopod.1" |
		sed -n 's/^\.Ql \([a-z-]*\).*/\1/p' | jq -R . | jq -sc 'sort')
	echo "paths: $paths" >&2
	echo "$out" | jq -e --argjson p "$paths" '($p | length) == 4 and (.properties.path.enum | sort) == $p'
}

@test "mcp: initialize answers the client's revision when supported, else our newest" {
	for v in 2025-11-25 2025-06-18 2024-11-05; do
		run --separate-stderr python3 "$RAW" --want 1 -- "$MCP" <<<"${INIT/2025-11-25/$v}"
		[ "$status" -eq 0 ]
		want=$v
		[ "$v" != 2024-11-05 ] || want=2025-11-25
		echo "$output" | jq -e --arg v "$want" '.messages[0].result.protocolVersion == $v and .rc == 0'
	done
	# the newest the pinned SDK sends is one we speak
	sdk=$(grep -o "LATEST_PROTOCOL_VERSION = '[^']*'" \
		"$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk/dist/esm/types.js")
	[ "$sdk" = "LATEST_PROTOCOL_VERSION = '2025-11-25'" ]
}

@test "mcp: malformed traffic gets its error and the server keeps serving (100 MB line bounded)" {
	run --separate-stderr python3 "$RAW" --want 9 --timeout 120 -- "$MCP" <<EOF
$INIT
garbage {
[{"jsonrpc":"2.0","id":9,"method":"ping"}]
{"jsonrpc":"2.0","method":"ping"}
{"jsonrpc":"2.0","method":"notifications/nosuch"}
{"jsonrpc":"2.0","id":2,"method":"nosuch/method"}
@BIG:104857600
{"jsonrpc":"2.0","id":3,"method":"ping"}
{"jsonrpc":"2.0","id":null,"method":"ping"}
"a string"
{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nosuch"}}
{"jsonrpc":"2.0","id":5,"method":"tools/call","params":[1]}
{"jsonrpc":"2.0","id":6,"method":"ping"}
EOF
	[ "$status" -eq 0 ]
	m() { echo "$output" | jq -e ".messages | $1"; }
	m '.[1].error.code == -32700 and .[1].id == null'
	m '.[2].error.code == -32600 and (.[2].error.message | contains("batch"))'
	# no answer to a notification, known or not: the next answer is id 2's
	m '.[3].id == 2 and .[3].error.code == -32601'
	m '.[4].error.code == -32600 and (.[4].error.message | contains("104857"))'
	m '.[5].id == 3 and .[5].result == {}'
	m '.[6].error.code == -32600 and .[7].error.code == -32600'
	m '.[8].id == 4 and .[8].error.code == -32602'
	m '.[9].id == 5 and .[9].error.code == -32602'
	m '.[10].id == 6 and .[10].result == {} and length == 11'
	echo "$output" | jq -e '.rc == 0'
}

@test "mcp: a line starting with NUL is a parse error (-32700), not a blank line" {
	run --separate-stderr python3 "$RAW" --want 3 --timeout 60 -- "$MCP" <<EOF
$INIT
@NUL:{"jsonrpc":"2.0","id":7,"method":"ping"}
{"jsonrpc":"2.0","id":8,"method":"ping"}
EOF
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.messages[1].error.code == -32700 and .messages[1].id == null'
	echo "$output" | jq -e '.messages[2].id == 8 and (.messages | length) == 3'
}

@test "mcp: sandbox_run: a command's status is a normal result; true, then exit 3" {
	call sandbox_run '{"argv":["true"],"commit_as":"t90-base"}'
	echo "$output" | jq -e '.result.isError == false and .result.structuredContent.ok == true and .result.structuredContent.exit_code == 0'
	echo "$output" | jq -e '.result.structuredContent.commit.stage.label == "t90-base"'
	# the text content carries the same JSON
	echo "$output" | jq -e '(.result.content[0].text | fromjson) == .result.structuredContent'
	call sandbox_run '{"command":"echo out; echo err >&2; exit 3"}'
	echo "$output" | jq -e '.result.isError == false and .result.structuredContent.exit_code == 3'
	echo "$output" | jq -e '.result.structuredContent | .stdout == "out\n" and .stderr == "err\n" and .vm.id != null'
	[ -z "$(isopod vm ls | jq -r 'select(.running) | .id')" ]
}

@test "mcp: sandbox_run: an infrastructure failure is isError with error_kind (unknown stage)" {
	call sandbox_run '{"argv":["true"],"stage":"no-such-stage"}'
	echo "$output" | jq -e '.result.isError == true and .result.structuredContent.ok == false'
	echo "$output" | jq -e '.result.structuredContent.error_kind == "not_found" and (.result.structuredContent.error | contains("no-such-stage"))'
	call stage_info '{"stage":"no-such-stage"}'
	echo "$output" | jq -e '.result.isError == true and .result.structuredContent.error_kind == "not_found"'
}

@test "mcp: bad input is -32602 naming the field, before anything is claimed or booted" {
	refused sandbox_run '{"argv":["true"],"vcpus":"2"}' vcpus
	# a stage reference has a label's grammar: never an option, never a path
	refused stage_info '{"stage":"--help"}' stage
	refused stage_rm '{"stage":"--recursive"}' stage
	refused stage_flatten '{"stage":"a/b","as":"x"}' stage
	refused stage_rm '{"stage":".."}' stage
	# what execve could not take is the client's error, not E2BIG later
	# (through raw.py: these are too long for the SDK driver's argv)
	local w
	w=$(head -c 131000 /dev/zero | tr '\0' x)
	run --separate-stderr python3 "$RAW" --want 3 --timeout 60 -- "$MCP" --io-root "$IO/sub" <<EOF
$INIT
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["$w$w"]}}}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["$w","$w","$w","$w","$w","$w","$w","$w","$w"]}}}
EOF
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.messages[1].id == 2 and .messages[1].error.code == -32602 and (.messages[1].error.message | contains("argv[0]"))'
	echo "$output" | jq -e '.messages[2].id == 3 and .messages[2].error.code == -32602 and (.messages[2].error.message | contains("together"))'
	# env names: one rule with the CLI's --env ([A-Za-z_][A-Za-z0-9_]*)
	refused sandbox_run '{"argv":["true"],"env":{"1X":"y"}}' env
	refused sandbox_run '{"argv":["true"],"env":{"-A\nB":"y"}}' env
	refused sandbox_run '{"argv":["true"],"env":{"A B":"y"}}' env
	refused sandbox_run '{"argv":["true"],"vcpus":0}' 'vcpus: want an integer from 1 to'
	refused sandbox_run '{"argv":["true"],"mem_mib":1}' mem_mib
	refused sandbox_run '{"argv":["true"],"timeout_s":86401}' 'timeout_s: want an integer from 1 to 86400'
	refused sandbox_run '{"argv":["true"],"bogus":1}' 'bogus: unknown field'
	refused sandbox_run '{"argv":["true"],"env":{"A=B":"x"}}' 'env: bad name'
	refused sandbox_run '{"argv":["true"],"env":{"A":1}}' 'env.A: want a string'
	refused sandbox_run '{"argv":[]}' 'argv: at least 1'
	refused sandbox_run '{}' 'argv or command'
	refused sandbox_run '{"argv":["true"],"command":"true"}' 'argv or command'
	refused sandbox_run '{"argv":["true"],"net":"wide"}' 'net'
	refused sandbox_run '{"argv":["true"],"stdin":"a","stdin_file":"in.txt"}' 'stdin_file'
	refused sandbox_run '{"argv":["true"],"copy_out":[{"guest":"/a:b","host":"x"}]}' 'copy_out[0].guest'
	refused nosuch_tool '{}' 'unknown tool'
	# the host-dependent ranges come from the tools' own checks (isopod-boot --check)
	refused sandbox_run '{"argv":["true"],"vcpus":1024}' '--vcpus 1024'
	echo "$output" | jq -e '.error.data.field == "vcpus"'
	refused sandbox_run '{"argv":["true"],"commit_as":"a/b"}' "cannot contain '/'"
	refused sandbox_run '{"argv":["true"],"name":"Bad_Name"}' 'Bad_Name'
}

@test "mcp: the I/O root: .., absolute paths outside and symlinks out are refused" {
	refused sandbox_run '{"argv":["true"],"stdin_file":"../outside/secret"}' 'leaves the I/O root'
	refused sandbox_run "{\"argv\":[\"true\"],\"stdin_file\":\"$IO/outside/secret\"}" 'outside the I/O root'
	refused sandbox_run '{"argv":["true"],"stdin_file":"secret-link"}' 'leaves the I/O root'
	refused sandbox_run '{"argv":["true"],"copy_in":[{"host":"link-out/secret","guest":"/tmp/s"}]}' 'copy_in[0].host'
	refused sandbox_run '{"argv":["true"],"copy_in":[{"host":"/etc/passwd","guest":"/tmp/s"}]}' 'outside the I/O root'
	refused sandbox_run '{"argv":["true"],"copy_in":[{"host":"/proc/self/root/etc/passwd","guest":"/tmp/s"}]}' 'outside the I/O root'
	# a directory: the symlink to one outside is refused, a FIFO is neither file nor directory
	refused sandbox_run '{"argv":["true"],"copy_in":[{"host":"link-out","guest":"/tmp/s"}]}' 'leaves the I/O root'
	refused sandbox_run '{"argv":["true"],"copy_in":[{"host":"tree/fifo","guest":"/tmp/s"}]}' 'is not a regular file or a directory'
	refused sandbox_run '{"argv":["true"],"stdin_file":"tree"}' 'stdin_file: tree is not a regular file'
	refused sandbox_run '{"argv":["true"],"copy_out":[{"guest":"/tmp/a","host":"link-out/x"}]}' 'leaves the I/O root'
	refused sandbox_run '{"argv":["true"],"copy_out":[{"guest":"/tmp/a","host":"link-out"}]}' 'copy_out[0].host'
	refused sandbox_run '{"argv":["true"],"copy_out":[{"guest":"/tmp/a","host":"../x"}]}' 'leaves the I/O root'
	refused sandbox_run '{"argv":["true"],"copy_out":[{"guest":"/tmp/a","host":"secret-link"}]}' 'not a regular file'
	refused sandbox_run "{\"argv\":[\"true\"],\"copy_out\":[{\"guest\":\"/tmp/a\",\"host\":\"$IO/outside/x\"}]}" 'outside the I/O root'
	[ ! -e "$IO/outside/x" ] && [ ! -e "$IO/x" ] || false
	# a copy_out destination's last component is never followed, even to a
	# directory beneath the root, and a trailing slash does not make it so
	ln -s tree "$IO/sub/link-tree"
	refused sandbox_run '{"argv":["true"],"copy_out":[{"guest":"/tmp/a","host":"link-tree/"}]}' 'symlink: not followed'
	refused sandbox_run '{"argv":["true"],"copy_out":[{"guest":"/tmp/a","host":"link-tree"}]}' 'not a regular file'
	rm "$IO/sub/link-tree"
}

@test "mcp: stdin_file, copy_in and copy_out beneath the I/O root, named as the client named them" {
	call sandbox_run '{"command":"cat /tmp/in; cat; echo made > /tmp/o1; echo made2 > /tmp/o2","stdin_file":"link-in","copy_in":[{"host":"in.txt","guest":"/tmp/in"}],"copy_out":[{"guest":"/tmp/o1","host":"."},{"guest":"/tmp/o2","host":"'"$IO"'/sub/renamed"}]}'
	echo "$output" | jq -e '.result.isError == false and .result.structuredContent.exit_code == 0'
	echo "$output" | jq -e '.result.structuredContent.stdout == "hello-in\nhello-in\n"'
	echo "$output" | jq -e '.result.structuredContent.copied_in[0].host == "in.txt"'
	echo "$output" | jq -e '[.result.structuredContent.copied_out[].host] == ["./o1", "'"$IO"'/sub/renamed"]'
	[ "$(cat "$IO/sub/o1")" = made ] && [ "$(cat "$IO/sub/renamed")" = made2 ] || false
	call sandbox_run '{"argv":["cat"],"stdin":"text-in"}'
	echo "$output" | jq -e '.result.structuredContent.stdout == "text-in"'
}

# The I/O root's claim for a directory: what lies beyond the root is never
# read through a link inside it (the links arrive as links).
@test "mcp: copy_in and copy_out of directories: links out of the I/O root arrive as links; into a directory; an existing name untouched; client paths" {
	rm -rf "$IO/sub/back" "$IO/sub/again" "$IO/sub/into" "$IO/sub/into2"
	mkdir -p "$IO/sub/into" "$IO/sub/into2/g"
	printf 'mine\n' >"$IO/sub/into2/g/keep"
	call sandbox_run '{"command":"for l in esc abs; do test -L /tmp/t/$l && echo \"$l link $(readlink /tmp/t/$l)\"; done; cat /tmp/t/dir/f; test -d /tmp/t/empty && echo empty-dir; cat /tmp/t/esc /tmp/t/abs /tmp/t/hl 2>/dev/null; mkdir -p /tmp/g/sub /tmp/g/e; echo out >/tmp/g/sub/f; ln -s /etc/passwd /tmp/g/pw; mkfifo /tmp/g/fifo","copy_in":[{"host":"tree","guest":"/tmp/t"}],"copy_out":[{"guest":"/tmp/g","host":"back"},{"guest":"/tmp/g","host":"into"},{"guest":"/tmp/g","host":"'"$IO"'/sub/into2"},{"guest":"/tmp/t","host":"again"}]}'
	echo "$output" | jq -c '.result.structuredContent | {stdout, copied_in, copied_out, warnings}'
	echo "$output" | jq -e '.result.isError == false and .result.structuredContent.exit_code == 0'
	echo "$output" | jq -e --arg io "$IO" '.result.structuredContent.stdout == "esc link ../../outside/secret\nabs link \($io)/outside/secret\nin-tree\nempty-dir\n"'
	echo "$output" | jq -e '.result.structuredContent.copied_in[0] | .host == "tree" and .tree and (.skipped | map(.path) | sort == ["fifo", "hl"])'
	echo "$output" | jq -e --arg io "$IO" '[.result.structuredContent.copied_out[].host] == ["back", "into/g", "\($io)/sub/into2/g", "again"]'
	echo "$output" | jq -e '.result.structuredContent.copied_out | (.[0], .[1]) | .tree and (.skipped | map(.path) == ["fifo"])'
	# an existing name is not replaced nor written into; the error names it as the client does
	echo "$output" | jq -e --arg io "$IO" '.result.structuredContent.copied_out[2] | (.error | startswith("\($io)/sub/into2/g: File exists")) and .tree == null'
	[ "$(cat "$IO/sub/into2/g/keep")" = mine ] && [ ! -e "$IO/sub/into2/g/sub" ] || false
	# no path of the server's (/proc/<pid>/fd/N) reaches the client
	[[ "$output" != */proc/* ]]
	for d in back into/g; do
		[ "$(cat "$IO/sub/$d/sub/f")" = out ] && [ -d "$IO/sub/$d/e" ] || false
		[ -L "$IO/sub/$d/pw" ] && [ "$(readlink "$IO/sub/$d/pw")" = /etc/passwd ] || false
		[ ! -e "$IO/sub/$d/fifo" ]
	done
	# the copied-in tree, back on the host: its links still links
	[ -L "$IO/sub/again/esc" ] && [ "$(readlink "$IO/sub/again/esc")" = ../../outside/secret ] || false
	[ -L "$IO/sub/again/abs" ] && [ "$(cat "$IO/sub/again/dir/f")" = in-tree ] && [ -d "$IO/sub/again/empty" ] || false
	[ ! -e "$IO/sub/again/hl" ] && [ ! -e "$IO/sub/again/fifo" ] || false
	rm -rf "$IO/sub/back" "$IO/sub/again" "$IO/sub/into" "$IO/sub/into2"
}

@test "mcp: sandbox_run provenance:true answers with the signed envelope, which verifies against the copied-out file; its private directory is gone" {
	local d="$BATS_TEST_TMPDIR"
	export ISOPOD_ATTEST_DIR="$d/keys" TMPDIR="$d/tmp"
	mkdir -p "$TMPDIR"
	"$ISOPOD_SRC/bin/isopod-attest" keygen >/dev/null
	call sandbox_run '{"command":"echo made >/tmp/o","copy_out":[{"guest":"/tmp/o","host":"prov-out.txt"}],"provenance":true}'
	echo "$output" | jq -e '.result.isError == false and .result.structuredContent.ok'
	echo "$output" | jq -e '.result.structuredContent.provenance | .path == null and .envelope.payloadType == "application/vnd.in-toto+json" and .subjects[0].name == "prov-out.txt"'
	echo "$output" | jq '.result.structuredContent.provenance.envelope' >"$d/env.json"
	run_isopod -0 verify-artifact "$IO/sub/prov-out.txt" "$d/env.json"
	jq -e '.valid and .command == ["sh", "-c", "echo made >/tmp/o"]' <<<"$output"
	[ -z "$(find "$TMPDIR" -name 'isopod-mcp-prov.*')" ]
	# nothing to sign: the front end's refusal, as bad input
	refused sandbox_run '{"argv":["true"],"provenance":true}' 'provenance'
	[ -z "$(find "$TMPDIR" -name 'isopod-mcp-prov.*')" ]
	rm -f "$IO/sub/prov-out.txt"
}

@test "mcp: a copy_out NAME made a symlink to a directory during the run is not followed" {
	# Checked at call time (absent), planted while the command sleeps (once
	# its VM runs: a fixed delay planted it before the call started on a
	# loaded host): the file must not land in the symlink's target (outside
	# the I/O root).
	local n0 i
	n0=$(isopod vm ls | jq -r 'select(.running) | .id' | wc -l)
	(
		for i in $(seq 1 300); do
			[ "$(isopod vm ls | jq -r 'select(.running) | .id' | wc -l)" -le "$n0" ] || break
			sleep 0.2
		done
		ln -s ../outside "$IO/sub/planted"
	) &
	local planter=$!
	call sandbox_run '{"command":"echo evil > /tmp/authorized_keys; sleep 8","copy_out":[{"guest":"/tmp/authorized_keys","host":"planted"}]}'
	wait "$planter"
	[ -L "$IO/sub/planted" ]
	rm -f "$IO/sub/planted"
	echo "$output" | jq -c '.result.structuredContent.copied_out'
	[ ! -e "$IO/outside/authorized_keys" ]
	[ ! -e "$IO/outside/planted" ]
	echo "$output" | jq -e '.result.structuredContent.exit_code == 0'
	echo "$output" | jq -e '.result.structuredContent.copied_out[0] | .host == "planted" and (.error | contains("symlink"))'
}

@test "mcp: an env value of 5000 bytes reaches the command (not an infrastructure failure)" {
	local v
	v=$(head -c 5000 /dev/zero | tr '\0' v)
	call sandbox_run '{"command":"echo ${#BIG}","env":{"BIG":"'"$v"'"}}'
	echo "$output" | jq -e '.result.isError == false and .result.structuredContent.stdout == "5000\n"'
}

@test "mcp: two calls run at once (their commands overlap in time)" {
	MCP_EXTRA=',"--max-concurrent","2"' client concurrent '{"args":{"command":"date +%s; sleep 4; date +%s"}}'
	echo "$output" | jq -e '[.calls[].result.structuredContent.exit_code] == [0, 0]'
	# [start, end] of each command, by the guests' clocks (set from the host's)
	echo "$output" | jq -e '[.calls[].result.structuredContent.stdout | split("\n")[:2] | map(tonumber)] as [$a, $b] |
		$a[0] < $b[1] and $b[0] < $a[1]'
}

@test "mcp: cancellation stops that call's VM within a second and answers nothing" {
	client cancel '{"args":{"argv":["sleep","120"]}}'
	echo "# $(echo "$output" | jq -c '{running_before, running_after, stop_ms}')" >&3
	echo "$output" | jq -e '(.running_before | length) == 1 and .running_after == []'
	echo "$output" | jq -e '.stop_ms < 1000'
	echo "$output" | jq -e '.aborted.message | contains("test cancel")'
}

# libexec_links DIR: DIR holds a link to each built tool, for a test that
# puts a wrapping `isopod` beside them (ISOPOD_LIBEXEC=DIR).
libexec_links() {
	local f
	mkdir -p "$1"
	for f in "$ISOPOD_SRC"/bin/isopod-*; do
		case $f in *.c) continue ;; esac
		ln -s "$f" "$1/"
	done
}

@test "mcp: cancelling a keep:true call stops its VM too (the client never learns its id)" {
	client cancel '{"args":{"argv":["sleep","120"],"keep":true}}'
	echo "$output" | jq -e '(.running_before | length) == 1 and .running_after == []'
}

@test "mcp: a cancelled keep:true call whose run kept its VM all the same (the cancel not taken: here the front end ignores it) has that VM stopped when the call ends, not left to outlive the server" {
	local lx="$BATS_TEST_TMPDIR/libexec"
	libexec_links "$lx"
	# the front end with INT, TERM and HUP ignored (as isopod-result with a
	# kept VM has them blocked): the run ends with its VM kept; the wrapper
	# ends with the cancel's SIGTERM
	# shellcheck disable=SC2016  # the wrapper's own $@
	printf '#!/bin/sh\n(trap "" INT TERM HUP; exec "%s/sh/isopod" "$@")\nsleep 30\n' "$ISOPOD_SRC" >"$lx/isopod"
	chmod +x "$lx/isopod"
	ISOPOD_LIBEXEC=$lx client cancel '{"args":{"argv":["true"],"keep":true}}'
	echo "# $(echo "$output" | jq -c '{running_before, running_after}')" >&3
	echo "$output" | jq -e '(.running_before | length) == 1 and .running_after == []'
}

@test "mcp: --max-concurrent 1 queues the second call; cancelling the first frees its slot for it" {
	# The ping is a marker in the answers' order: id 3 answered before it
	# ran beside id 2 (the bound broken); never answered, the cancelled
	# call kept its slot.  And by the records: id 3's VM was claimed at
	# least the 4 s of the sleep after the first one (after the cancel).
	local first="$BATS_TEST_TMPDIR/first" second
	run --separate-stderr python3 "$RAW" --want 3 --timeout 120 -- "$MCP" --max-concurrent 1 <<EOF
$INIT
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["sleep","120"]}}}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["echo","second"]}}}
@SH:i=0; until [ "\$(isopod vm ls | jq -r 'select(.running) | .id' | wc -l)" -ge 1 ]; do i=\$((i+1)); [ \$i -lt 600 ] || exit 1; sleep 0.1; done; isopod vm ls | jq -r 'select(.running) | .id' | head -n 1 >"$first"
@SLEEP:4
{"jsonrpc":"2.0","id":4,"method":"ping"}
@WAIT:2
{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}
EOF
	[ "$status" -eq 0 ]
	echo "$output" | jq -c '[.messages[] | select(.id) | .id]'
	echo "$output" | jq -e '[.messages[] | select(.id) | .id] == [1, 4, 3] and .rc == 0'
	echo "$output" | jq -e '[.messages[] | select(.id == 3)][0].result.structuredContent.stdout == "second\n"'
	second=$(echo "$output" | jq -er '[.messages[] | select(.id == 3)][0].result.structuredContent.vm.id')
	[ -z "$(isopod vm ls | jq -r 'select(.running) | .id')" ]
	# (claimed at once when both ran: 0 s apart, the bound broken, though
	# the answers' order held on a loaded host)
	[ "$(cat "$first")" != "$second" ]
	isopod vm ls | jq -s -e --arg a "$(cat "$first")" --arg b "$second" \
		'(map(select(.id == $a))[0].created | fromdateiso8601) as $t1 |
		(map(select(.id == $b))[0].created | fromdateiso8601) as $t2 | $t2 - $t1 >= 4'
}

@test "mcp: the server's end stops the VMs its calls kept" {
	local id i
	call sandbox_run '{"argv":["true"],"keep":true}'
	echo "$output" | jq -e '.result.isError == false'
	id=$(echo "$output" | jq -er '.result.structuredContent.vm.id')
	# the client is gone (it closed the server's stdin): what the server
	# kept is stopped before it exits
	for i in $(seq 50); do
		vm_locked "$id" || break
		sleep 0.2
	done
	! vm_locked "$id" || false
	isopod vm rm "$id" >/dev/null
}

@test "mcp: a call with a progressToken hears its VM's states as notifications/progress" {
	client progress '{"args":{"argv":["sleep","2"]}}'
	echo "# $(echo "$output" | jq -c '.heard')" >&3
	echo "$output" | jq -e '.result.structuredContent.exit_code == 0'
	echo "$output" | jq -e '.heard[0].message == "started"'
	echo "$output" | jq -e '[.heard[].message | select(test("^vm-[0-9a-f]{12}: running"))] | length == 1'
	echo "$output" | jq -e '[.heard[].progress] as $p | $p == ($p | sort) and ($p | unique | length) == ($p | length)'
}

@test "mcp: progress names the front end's steps as they start (boot, exec, commit, stop), and a flatten's progress" {
	# (raw: the SDK client dispatches notifications a microtask late and
	# drops those that share a read with the answer; the server sends them
	# first)
	run --separate-stderr python3 "$RAW" --want 2 --timeout 240 -- "$MCP" <<EOF
$INIT
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["sleep","2"],"commit_as":"t90-steps"},"_meta":{"progressToken":"p2"}}}
EOF
	[ "$status" -eq 0 ]
	local heard
	heard=$(echo "$output" | jq -c '[.messages[] | select(.method == "notifications/progress") | .params.message]')
	echo "# $heard" >&3
	echo "$output" | jq -e '[.messages[] | select(.id == 2)][0].result.structuredContent.commit.stage.label == "t90-steps"'
	echo "$heard" | jq -e 'map(select(startswith("step "))) == ["step boot", "step exec", "step commit", "step stop"]'
	# the boot's path (warm, cold, snapshot-build), from the VM's record,
	# polled every 500 ms: the command lasts 2 s so that a poll sees it
	echo "$heard" | jq -e 'map(select(test("^vm-[0-9a-f]{12}: running, (warm|cold|snapshot-build)$"))) | length == 1'
	# every notification came before the answer
	echo "$output" | jq -e '.messages | (map(.id == 2) | index(true)) == length - 1'
	# stage_flatten of that stage: qemu-img rebase's progress, each tenth
	# (0 % and 100 % at least), as isopod-stage writes it on
	# ISOPOD_PROGRESS_FD, before the answer (about 2 s, no VM)
	run --separate-stderr python3 "$RAW" --want 2 --timeout 120 -- "$MCP" <<EOF
$INIT
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"stage_flatten","arguments":{"stage":"t90-steps","as":"t90-flat"},"_meta":{"progressToken":"f2"}}}
EOF
	[ "$status" -eq 0 ]
	heard=$(echo "$output" | jq -c '[.messages[] | select(.method == "notifications/progress") | .params.message]')
	echo "# $heard" >&3
	echo "$output" | jq -e '[.messages[] | select(.id == 2)][0].result.structuredContent.stage.label == "t90-flat"'
	echo "$heard" | jq -e '.[0] == "started" and .[1] == "flatten 0%" and .[-1] == "flatten 100%"'
	echo "$heard" | jq -e '.[1:] | map(capture("^flatten (?<p>[0-9]+)%$").p | tonumber) as $p |
		$p == ($p | sort | unique) and all($p[]; . % 10 == 0)'
	echo "$output" | jq -e '.messages | (map(.id == 2) | index(true)) == length - 1'
	isopod stage rm t90-flat >/dev/null
	isopod stage rm t90-steps >/dev/null
}

@test "mcp: a call that has to build the warm snapshot says so in its progress (booting, then running, snapshot-build)" {
	run --separate-stderr python3 "$RAW" --want 3 --timeout 240 -- "$MCP" <<EOF
$INIT
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"warm_rm","arguments":{"all":true}}}
@WAIT:2
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["sleep","2"]},"_meta":{"progressToken":"s3"}}}
EOF
	[ "$status" -eq 0 ]
	local heard
	heard=$(echo "$output" | jq -c '[.messages[] | select(.method == "notifications/progress") | .params.message]')
	echo "# $heard" >&3
	echo "$output" | jq -e '[.messages[] | select(.id == 3)][0].result.structuredContent | .exit_code == 0 and .path == "snapshot-build"'
	echo "$heard" | jq -e 'map(select(test("^vm-[0-9a-f]{12}: running, snapshot-build$"))) | length == 1'
}

@test "mcp: progress reads the call's own VM record, not any record naming its front end as owner" {
	# A record planted while the call runs, owned (owner_pid) by the call's
	# front end: matching records by owner pid reported it as the call's VM.
	# The front end's pid is found as the shell or, once the shell exec'd it,
	# as isopod-run (the same pid).
	local plant="$ISOPOD_HOME/vms/vm-00000000fa4e" id
	run --separate-stderr python3 "$RAW" --want 2 --timeout 240 -- "$MCP" <<EOF
$INIT
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["sleep","4.25"]},"_meta":{"progressToken":"p2"}}}
@SH:i=0; until f=\$(pgrep -f -o '(isopod run --json-only|isopod-run .*) -- sleep [4].25'); do i=\$((i+1)); [ \$i -lt 100 ] || exit 1; sleep 0.1; done; mkdir -p "$plant" && printf '{"id":"vm-00000000fa4e","name":"planted","state":"planted","owner_pid":%d,"created":"0"}' "\$f" >"$plant/meta.json"
@SLEEP:2
EOF
	rm -rf "$plant"
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -er '.messages[] | select(.id == 2) | .result.structuredContent.vm.id')
	echo "$output" | jq -c '[.messages[] | select(.method == "notifications/progress") | .params.message]'
	echo "$output" | jq -e --arg id "$id" '[.messages[] | select(.method == "notifications/progress") | .params.message |
		select(test("^vm-"))] | length >= 1 and all(startswith($id + ": "))'
}

@test "mcp: a cancel after the commit commits nothing: the call's stage is removed" {
	# The front end past its commit and still there (a wrapper that waits
	# after the real run): the client sees the stage, then cancels.
	local lx="$BATS_TEST_TMPDIR/libexec"
	libexec_links "$lx"
	# shellcheck disable=SC2016  # the wrapper's own $@ and $?
	printf '#!/bin/sh\n"%s/sh/isopod" "$@"\nrc=$?\nsleep 30\nexit $rc\n' "$ISOPOD_SRC" >"$lx/isopod"
	chmod +x "$lx/isopod"
	MCP_EXTRA=',"--max-concurrent","4"' ISOPOD_LIBEXEC=$lx client cancel_commit '{"args":{"argv":["true"],"commit_as":"t90-cancelled"}}'
	echo "$output" | jq -c '{seen, kept, running_after}'
	echo "$output" | jq -e '.seen == true and .kept == false and .running_after == []'
	! isopod stage ls | jq -e 'select(.label == "t90-cancelled")' || false
}

@test "mcp: host files are opened when a call starts, not while it waits: 3 queued calls of 30 files, 48 descriptors" {
	local cin i
	cin=$(for i in $(seq 30); do printf '{"host":"in.txt","guest":"/tmp/f%d"},' "$i"; done)
	cin="[${cin%,}]"
	# shellcheck disable=SC2016  # for that sh
	run --separate-stderr python3 "$RAW" --want 5 --timeout 240 -- sh -c 'ulimit -n 48 && exec "$0" "$@"' \
		"$MCP" --io-root "$IO/sub" --max-concurrent 1 <<EOF
$INIT
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["sleep","1"]}}}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"vm_exec","arguments":{"vm":"vm-000000000000","argv":["true"],"copy_in":$cin}}}
{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"vm_exec","arguments":{"vm":"vm-000000000000","argv":["true"],"copy_in":$cin}}}
{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"vm_exec","arguments":{"vm":"vm-000000000000","argv":["true"],"copy_in":$cin}}}
EOF
	[ "$status" -eq 0 ]
	echo "$output" | jq -c '[.messages[] | select(.id) | {id, e: .error.message, k: .result.structuredContent.error_kind}]'
	echo "$output" | jq -e '[.messages[] | select(.id == 2)][0].result.structuredContent.exit_code == 0'
	# each queued call got to run: not found, not "Too many open files"
	for i in 3 4 5; do
		echo "$output" | jq -e --argjson i "$i" '[.messages[] | select(.id == $i)][0].result |
			.isError == true and .structuredContent.error_kind == "not_found"'
	done
}

@test "mcp: out of descriptors is the server's failure (isError, infra), not the client's -32602; it keeps serving" {
	local cin i
	cin=$(for i in $(seq 30); do printf '{"host":"in.txt","guest":"/tmp/f%d"},' "$i"; done)
	cin="[${cin%,}]"
	# shellcheck disable=SC2016  # for that sh
	run --separate-stderr python3 "$RAW" --want 3 --timeout 60 -- sh -c 'ulimit -n 24 && exec "$0" "$@"' \
		"$MCP" --io-root "$IO/sub" <<EOF
$INIT
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"vm_exec","arguments":{"vm":"vm-000000000000","argv":["true"],"copy_in":$cin}}}
{"jsonrpc":"2.0","id":3,"method":"ping"}
EOF
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.messages[1].id == 2 and .messages[1].result.isError == true and
		.messages[1].result.structuredContent.error_kind == "infra" and
		(.messages[1].result.structuredContent.error | contains("Too many open files"))'
	echo "$output" | jq -e '.messages[2].id == 3 and .messages[2].result == {}'
}

@test "mcp: the MCP Inspector (CLI mode), a second real client, lists the tools and runs sandbox_run" {
	local insp="$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/inspector/cli/build/cli.js" cfg
	[ -f "$insp" ] || { echo "# the Inspector is missing: run sh .ci/setup (npm ci in t/mcp)" >&3; false; }
	# registered the way the README's snippet registers it (mcpServers)
	cfg="$BATS_TEST_TMPDIR/mcp.json"
	jq -n --arg cmd "$MCP" --arg root "$IO/sub" \
		'{mcpServers: {isopod: {command: $cmd, args: ["--io-root", $root]}}}' >"$cfg"
	run --separate-stderr timeout 120 node "$insp" --cli --config "$cfg" --server isopod --method tools/list
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '[.tools[].name] | length == 14 and index("sandbox_run") != null and index("doctor_status") != null'
	echo "$output" | jq -e '.tools[] | select(.name == "sandbox_run") | .inputSchema.properties.argv.type == "array" and .outputSchema.type == "object"'
	run --separate-stderr timeout 300 node "$insp" --cli --config "$cfg" --server isopod --method tools/call \
		--tool-name sandbox_run --tool-arg 'argv=["sh","-c","cat /tmp/in; exit 5"]' \
		--tool-arg 'copy_in=[{"host":"in.txt","guest":"/tmp/in"}]' --tool-arg timeout_s=120
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.isError == false and .structuredContent.exit_code == 5 and .structuredContent.stdout == "hello-in\n"'
	echo "$output" | jq -e '(.content[0].text | fromjson) == .structuredContent'
}

@test "mcp: a kept VM: vm_exec (a failing command is data; stdin; a directory in and out), vm_stop, vm_rm" {
	rm -rf "$IO/sub/kept-back"
	client kept '{"args":{"argv":["true"]},"exec3":{"command":"readlink /tmp/kt/esc; cat /tmp/kt/esc 2>/dev/null; mkdir /tmp/kt/new","copy_in":[{"host":"tree","guest":"/tmp/kt"}],"copy_out":[{"guest":"/tmp/kt","host":"kept-back"}]}}'
	echo "$output" | jq -e '.id | startswith("vm-")'
	echo "$output" | jq -e '.exec.result.isError == false and .exec.result.structuredContent.exit_code == 4 and .exec.result.structuredContent.stdout == "in-kept\n"'
	echo "$output" | jq -e '.exec2.result.structuredContent.stdout == "fed"'
	echo "$output" | jq -c '.exec3.result.structuredContent | {stdout, copied_in, copied_out}'
	echo "$output" | jq -e '.exec3.result.structuredContent | .stdout == "../../outside/secret\n" and .copied_in[0].host == "tree" and .copied_in[0].tree and .copied_out[0].host == "kept-back" and .copied_out[0].tree'
	[ -L "$IO/sub/kept-back/esc" ] && [ -d "$IO/sub/kept-back/new" ] && [ "$(cat "$IO/sub/kept-back/dir/f")" = in-tree ] || false
	rm -rf "$IO/sub/kept-back"
	echo "$output" | jq -e '.stop.result.isError == false and .stop.result.structuredContent.ok == true'
	echo "$output" | jq -e '.rm.result.structuredContent.removed == [.id]'
}

# (t90-base is the stage the first sandbox_run test commits)
@test "mcp: stage, warm, image, vm and gc tools answer with the tools' JSON" {
	call image_list '{}'
	echo "$output" | jq -e '.result.isError == false and (.result.structuredContent.images | map(.kind) | index("kernel") != null)'
	call stage_list '{}'
	echo "$output" | jq -e '.result.isError == false and ([.result.structuredContent.stages[].label] | index("t90-base") != null)'
	echo "$output" | jq -e '.result.structuredContent.stages | all(.base_current == true)'
	call stage_info '{"stage":"t90-base"}'
	echo "$output" | jq -e '.result.isError == false and .result.structuredContent.ok == true'
	call stage_flatten '{"stage":"t90-base","as":"t90-flat"}'
	echo "$output" | jq -e '.result.isError == false and .result.structuredContent.stage.label == "t90-flat"'
	call stage_rm '{"stage":"t90-flat"}'
	echo "$output" | jq -e '.result.isError == false'
	call stage_info '{"stage":"t90-flat"}'
	echo "$output" | jq -e '.result.isError == true and .result.structuredContent.error_kind == "not_found"'
	call warm_list '{}'
	echo "$output" | jq -e '.result.isError == false and (.result.structuredContent.snapshots | length >= 1)'
	call warm_rm '{"keys":["0000000000000000000000000000000000000000000000000000000000000000"]}'
	echo "$output" | jq -e '.result.isError == true or .result.structuredContent.ok == true'
	call doctor_status '{}'
	echo "$output" | jq -e '.result.isError == false and (.result.structuredContent.accel | type == "string")'
	call gc '{"dry_run":true}'
	echo "$output" | jq -e '.result.isError == false and .result.structuredContent.ok == true'
	call vm_list '{}'
	echo "$output" | jq -e '.result.structuredContent.vms | type == "array"'
}

@test "mcp: doctor_status reports the attestation the server checks: whether it verifies, and why not" {
	local att="$BATS_TEST_TMPDIR/attestation.json"
	echo '{"payloadType":"x"}' >"$att"
	MCP_EXTRA=",\"--attestation\",\"$att\"" call doctor_status '{}'
	echo "$output" | jq -e --arg a "$att" '.result.isError == false and
		(.result.structuredContent.attestation | .path == $a and .required == false and
		 .valid == false and (.error | contains("does not verify")))'
	# none there, none required: no attestation key (the CLI's doctor too)
	MCP_EXTRA=",\"--attestation\",\"$att.absent\"" call doctor_status '{}'
	echo "$output" | jq -e '.result.isError == false and .result.structuredContent.attestation == null'
	ISOPOD_ATTESTATION=$att run --separate-stderr isopod doctor --quick
	echo "$output" | jq -e --arg a "$att" '.attestation.path == $a and .attestation.valid == false'
}

@test "mcp: logging/setLevel debug sends notifications/message; stdout is JSON-RPC only" {
	run --separate-stderr python3 "$RAW" --want 3 -- "$MCP" <<EOF
$INIT
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"vm_list","arguments":{}}}
{"jsonrpc":"2.0","id":4,"method":"logging/setLevel","params":{"level":"loud"}}
EOF
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '[.messages[] | select(.method == "notifications/message")] | length > 0'
	echo "$output" | jq -e '[.messages[] | select(.id == 4)][0].error.code == -32602'
	echo "$output" | jq -e 'all(.messages[]; .jsonrpc == "2.0")'
}

@test "mcp: stdin closed stops every call's VM and the server exits 0" {
	run --separate-stderr python3 "$RAW" --want 1 --close-after-s 0 -- "$MCP" <<EOF
$INIT
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["sleep","120"]}}}
@SLEEP:8
EOF
	# (8 s: the warm boot is done; if it were not, the close would stop
	# the front end wherever it is: none may be left running either way)
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.rc == 0 and .exit_ms < 10000'
	[ -z "$(isopod vm ls | jq -r 'select(.running) | .id')" ]
	gc_clean
}

@test "mcp: the client stops reading mid-call: every call's VM and every kept VM stopped, then exit 111" {
	# stdin stays open: the server learns the client is gone only from a
	# write (EPIPE), here the answer to a ping.  It stops its calls itself
	# and waits for them (not the front ends' parent-death signal, which
	# cannot reach a kept VM), so nothing runs the moment it has exited.
	local d="$BATS_TEST_TMPDIR" spid line kept i rc=0
	mkfifo "$d/in" "$d/out"
	"$MCP" <"$d/in" >"$d/out" 2>"$d/err" &
	spid=$!
	exec 7>"$d/in" 8<"$d/out"
	printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["true"],"keep":true}}}' >&7
	IFS= read -r -t 240 -u 8 line
	kept=$(echo "$line" | jq -er 'select(.id == 1) | .result.structuredContent.vm.id')
	vm_locked "$kept"
	printf '%s\n' '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["sleep","120"]}}}' >&7
	for i in $(seq 1 240); do
		[ "$(isopod vm ls | jq -r 'select(.running) | .id' | wc -l)" -lt 2 ] || break
		sleep 0.5
	done
	[ "$(isopod vm ls | jq -r 'select(.running) | .id' | wc -l)" -eq 2 ]
	exec 8<&-
	printf '%s\n' '{"jsonrpc":"2.0","id":3,"method":"ping"}' >&7
	for i in $(seq 1 300); do
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$spid" 2>/dev/null; then
		echo "# the server outlived its client by 30 s" >&3
		kill "$spid"
	fi
	wait "$spid" || rc=$?
	# (checked at once: the server's exit comes after its VMs' stops)
	[ -z "$(isopod vm ls | jq -r 'select(.running) | .id')" ]
	exec 7>&-
	cat "$d/err"
	[ "$rc" -eq 111 ]
	grep -q 'unable to write to the client' "$d/err"
	! vm_locked "$kept" || false
	isopod vm rm "$kept" >/dev/null
	gc_clean
}

@test "mcp: SIGKILL of the server: each front end stops its VM (parent-death signal), nothing leaks" {
	local fifo="$BATS_TEST_TMPDIR/in" spid n i
	mkfifo "$fifo"
	"$MCP" <"$fifo" >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" &
	spid=$!
	exec 7>"$fifo"
	printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["sleep","120"]}}}' >&7
	for i in $(seq 1 120); do
		n=$(isopod vm ls | jq -r 'select(.running) | .id' | wc -l)
		[ "$n" -eq 0 ] || break
		sleep 0.5
	done
	[ "$n" -eq 1 ]
	kill -9 "$spid"
	for i in $(seq 1 50); do
		n=$(isopod vm ls | jq -r 'select(.running) | .id' | wc -l)
		[ "$n" -eq 0 ] && break
		sleep 0.1
	done
	exec 7>&-
	wait "$spid" || true
	echo "# VM stopped $((i * 100)) ms after the server's SIGKILL (poll granularity)" >&3
	[ "$n" -eq 0 ]
	gc_clean
}

# (the one test with a lab: the attestation's subjects include the live
# ruleset, which only a lab's host netns has; removed here, pass or fail)
teardown() {
	[ -z "${LAB_NAME-}" ] || sh "$LAB" down "$LAB_NAME"
}

@test "mcp: a host that requires an attestation: none valid, no start (111); sandbox_run refuses once it stops verifying" {
	[ "$(id -u)" -eq 0 ] || skip "needs root: network namespaces"
	local conf att now subj cov n0
	isopod_lab_up "t90a$$" --slots 1
	export ISOPOD_ATTEST_DIR="$BATS_TEST_TMPDIR/keys"
	"$ISOPOD_SRC/bin/isopod-attest" keygen >/dev/null
	# the key isopod-runner reads: the host config's require_attestation
	conf="$BATS_TEST_TMPDIR/config"
	cp "$LAB_CONF" "$conf"
	printf 'require_attestation = maybe\n' >>"$conf"
	export ISOPOD_SYSCONFIG=$conf
	run --separate-stderr ip netns exec "$LAB_NAME-host" "$MCP" </dev/null
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"$conf:"*": require_attestation: yes or no"* ]]
	sed -i 's/^require_attestation = maybe$/require_attestation = yes/' "$conf"
	att="$BATS_TEST_TMPDIR/attestation.json"
	run --separate-stderr ip netns exec "$LAB_NAME-host" "$MCP" --attestation "$att" </dev/null
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"isopod-mcp: fatal: refusing to start: this host requires an attestation: attestation $att does not verify"* ]]
	# a passing report of the lab's host, signed (as t/85-runner.bats signs)
	now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	subj=$(ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-attest" subjects | jq -c .subjects)
	cov=$(adverse_coverage "$LAB_NAME-host")
	jq -n --arg id "$(cat /etc/machine-id)" --arg now "$now" --argjson s "$subj" --argjson c "$cov" \
		'{doctor: {version: "test", suite: "adverse"}, host: {id: $id, hostname: "lab"},
		  started: $now, finished: $now, subjects: $s, verdict: "pass", setup: {ok: true},
		  vms: $c.vms, host_checks: $c.host_checks, probes: $c.probes,
		  counts: {probes: ($c.probes | length), pass: ($c.probes | length), fail: 0, error: 0}}' \
		>"$BATS_TEST_TMPDIR/report.json"
	ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-attest" sign -o "$att" "$BATS_TEST_TMPDIR/report.json" >/dev/null
	# valid: it serves; then the table flushed: sandbox_run and vm_exec
	# refuse, naming the subject; the other tools still answer
	n0=$(isopod vm ls | wc -l)
	run --separate-stderr python3 "$RAW" --want 6 --timeout 240 -- \
		ip netns exec "$LAB_NAME-host" "$MCP" --attestation "$att" --recheck-s 0 <<EOF
$INIT
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["echo","attested"]}}}
@WAIT:2
@SH:ip netns exec "$LAB_NAME-host" nft flush table inet isopod
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["echo","unattested"]}}}
{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"vm_exec","arguments":{"vm":"vm-000000000000","argv":["true"]}}}
{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"stage_list","arguments":{}}}
@WAIT:5
@SH:sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 1 --user 0 >/dev/null
{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["echo","stale"]}}}
EOF
	[ "$status" -eq 0 ]
	r() { echo "$output" | jq -e --argjson i "$1" "[.messages[] | select(.id == \$i)][0].result | $2"; }
	r 2 '.isError == false and .structuredContent.stdout == "attested\n"'
	r 3 '.isError == true and .structuredContent.error_kind == "attestation" and
		(.structuredContent.error | contains("ruleset/nftables"))'
	r 4 '.isError == true and .structuredContent.error_kind == "attestation"'
	r 5 '.isError == false'
	# the bytes back (netsetup): the old attestation verifies again, but
	# the host changed after it was signed
	r 6 '.isError == true and .structuredContent.error_kind == "attestation" and
		(.structuredContent.error | contains("verifies again, but the host changed"))'
	# the refused call claimed no VM: one record more, the attested call's
	[ "$(isopod vm ls | wc -l)" -eq $((n0 + 1)) ]
	echo "$stderr" | grep -q 'refusing sandbox_run: attestation .* does not verify'
	# The store remembers the change (attest-stale.json): netsetup puts
	# the bytes back and the old attestation verifies again, but neither
	# this server nor a new one takes it; a doctor run started since does.
	jq -e --argjson q "$(jq -r .payload "$att" | base64 -d | jq .predicate.sequence)" \
		'.sequence == $q and (.seen | test("^[0-9-]{10}T[0-9:]{8}Z$"))' "$ISOPOD_HOME/attest-stale.json"
	sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 1 --user 0 >/dev/null
	ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-attest" verify "$att" >/dev/null
	run --separate-stderr ip netns exec "$LAB_NAME-host" "$MCP" --attestation "$att" </dev/null
	echo "$stderr"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"refusing to start: this host requires an attestation: attestation $att (sequence "*") verifies again, but the host changed after it was signed"* ]]
	# a record that cannot be read is never "nothing seen": at the start,
	# and at a call (another server of the store marked it meanwhile)
	cp "$ISOPOD_HOME/attest-stale.json" "$BATS_TEST_TMPDIR/stale.json"
	echo '{"sequence": 1' >"$ISOPOD_HOME/attest-stale.json"
	run --separate-stderr ip netns exec "$LAB_NAME-host" "$MCP" --attestation "$att" </dev/null
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"refusing to start: unable to read what this store's servers saw: $ISOPOD_HOME/attest-stale.json"* ]]
	rm "$ISOPOD_HOME/attest-stale.json"
	run --separate-stderr python3 "$RAW" --want 4 --timeout 240 -- \
		ip netns exec "$LAB_NAME-host" "$MCP" --attestation "$att" <<EOF
$INIT
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"stage_list","arguments":{}}}
@WAIT:2
@SH:mkdir "$ISOPOD_HOME/attest-stale.json"
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["echo","unread"]}}}
@WAIT:3
@SH:rmdir "$ISOPOD_HOME/attest-stale.json" && cp "$BATS_TEST_TMPDIR/stale.json" "$ISOPOD_HOME/attest-stale.json"
{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["echo","marked"]}}}
EOF
	echo "$stderr"
	[ "$status" -eq 0 ]
	r 3 '.isError == true and .structuredContent.error_kind == "attestation" and
		(.structuredContent.error | test("unable to read what this store.s servers saw"))'
	# the mark another server made (the record put back) holds here too
	r 4 '.isError == true and .structuredContent.error_kind == "attestation" and
		(.structuredContent.error | contains("verifies again, but the host changed"))'
	# a report of a doctor run started after the change, signed: it serves
	wait_past_seen
	now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	jq --arg now "$now" '.started = $now | .finished = $now' "$BATS_TEST_TMPDIR/report.json" >"$BATS_TEST_TMPDIR/fresh.json"
	ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-attest" sign -o "$att" "$BATS_TEST_TMPDIR/fresh.json" >/dev/null
	run --separate-stderr python3 "$RAW" --want 2 --timeout 240 -- \
		ip netns exec "$LAB_NAME-host" "$MCP" --attestation "$att" <<EOF
$INIT
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"argv":["echo","fresh"]}}}
EOF
	echo "$stderr"
	[ "$status" -eq 0 ]
	r 2 '.isError == false and .structuredContent.stdout == "fresh\n"'
}

# wait_past_seen: the clock is past the second this store's servers last
# saw the host change: a report made now is of a doctor run after it.
wait_past_seen() {
	local seen i
	seen=$(jq -r .seen "$ISOPOD_HOME/attest-stale.json")
	for i in $(seq 1 50); do
		[[ "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$seen" ]] && return 0
		sleep 0.1
	done
	return 1
}
