#!/bin/sh
# t/oci/mkchain.sh HOME N [MIB] [PREFIX] [PARENT] - a store with a fake base
# image and a chain of N stages on it (on stage PARENT when given), without a
# VM: each layer a qcow2 written by
# qemu-io (MIB MiB of its own bytes, default 1), rebased as isopod-commit
# does, made read-only, described, and sealed by `isopod-stage verify
# --reseal` (trust on first use, the owner's decision).  Prints the ids,
# root first.  The base is 8 MiB of a fixed pattern unless HOME already has
# images/current-base (the real one of images/register).
set -eu
home=$1 n=$2 mib=${3:-1} prefix=${4:-s}
mkdir -p "$home/images" "$home/stages" "$home/locks"
if [ -f "$home/images/current-base" ]; then
	sha=$(cat "$home/images/current-base")
else
	tmp=$home/images/fake.tmp
	python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 32768)' >"$tmp"
	sha=$(sha256sum "$tmp" | cut -d' ' -f1)
	mv "$tmp" "$home/images/base-$sha.img"
	chmod 0444 "$home/images/base-$sha.img"
	printf '{"flavor":"base","sha256":"%s","size":8388608,"created":"2026-01-01T00:00:00Z","inputs":{}}\n' \
		"$sha" >"$home/images/base-$sha.json"
fi
parent=${5-}
first=1
[ -z "$parent" ] || first=$(($(jq .depth "$home/stages/$parent/meta.json") + 1))
for i in $(seq "$first" $((first + n - 1))); do
	id=st-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
	d=$home/stages/$id
	mkdir "$d"
	if [ -z "$parent" ]; then
		qemu-img create -q -f qcow2 -F raw -b "$home/images/base-$sha.img" "$d/layer.qcow2" 4G
		qemu-img rebase -u -f qcow2 -F raw -b "../../images/base-$sha.img" "$d/layer.qcow2"
	else
		qemu-img create -q -f qcow2 -F qcow2 -b "$home/stages/$parent/layer.qcow2" "$d/layer.qcow2"
		qemu-img rebase -u -f qcow2 -F qcow2 -b "../$parent/layer.qcow2" "$d/layer.qcow2"
	fi
	qemu-io -f qcow2 -c "write -P $((i % 250 + 1)) $((i * mib))M ${mib}M" "$d/layer.qcow2" >/dev/null
	# MKCHAIN_EDGES=1: the last layer also zeroes base data (at 0),
	# discards a lower layer's cluster (at 2 MiB) and grows the disk to
	# 5 GiB with data past the base's 4 (what a flatten must keep)
	if [ "${MKCHAIN_EDGES:-0}" = 1 ] && [ "$i" -eq $((first + n - 1)) ]; then
		qemu-io -f qcow2 -c "write -z 0 64k" -c "discard 2M 64k" "$d/layer.qcow2" >/dev/null
		qemu-img resize -q -f qcow2 "$d/layer.qcow2" 5G
		qemu-io -f qcow2 -c "write -P 119 4608M 64k" "$d/layer.qcow2" >/dev/null
	fi
	chmod 0444 "$d/layer.qcow2"
	jq -n --arg id "$id" --arg p "$parent" --argjson depth "$i" --arg sha "$sha" \
		--arg lb "$prefix$i" \
		'{id:$id, name:$lb, label:$lb, parent:(if $p == "" then null else $p end),
		  depth:$depth, base:{flavor:"base", sha256:$sha}, size:0,
		  created:"2026-01-01T00:00:00Z", from_vm:"vm-000000000000"}' >"$d/meta.json"
	ISOPOD_HOME=$home isopod-stage verify --reseal "$id" >/dev/null
	echo "$id"
	parent=$id
done
