# isopod - plain Makefile (see STYLE: sbase/config.mk style).
.POSIX:

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBEXECDIR ?= $(PREFIX)/lib/isopod
MANDIR ?= $(PREFIX)/share/man
DESTDIR ?=

CC = cc
MUSLCC ?= musl-gcc
WARN = -Wall -Wextra -Werror=format=2 -Werror=missing-prototypes -Werror=shadow \
       -Wswitch-enum -Werror=implicit-function-declaration
CFLAGS = -O2 -g
ALL_CFLAGS = $(CFLAGS) $(WARN) -std=c11 -D_GNU_SOURCE -Ilib
LDLIBS_HOST = -ljansson -lsodium
LDLIBS_NET = -lnftnl -lmnl -lbpf
# The taps' tc program (eBPF), built into netsetup's lib/tcfilter.o.
BPFCC = clang
BPF_CFLAGS = -O2 -g -target bpf -Wall -Werror -I/usr/include/$$(gcc -print-multiarch)
TCLIB = lib/tcfilter.o lib/tapfilter_obj.o

TOOLS = bin/isopod-claim bin/isopod-boot bin/isopod-exec bin/isopod-stop bin/isopod-gc \
	bin/isopod-fork bin/isopod-commit bin/isopod-stage bin/isopod-netsetup bin/isopod-warm \
	bin/isopod-broker bin/isopod-supervise bin/isopod-attest bin/isopod-image bin/isopod-doctor \
	bin/isopod-result bin/isopod-runner bin/isopod-vm bin/isopod-mcp bin/isopod-jail bin/isopod-provenance \
	bin/isopod-allow bin/isopod-oci bin/isopod-slurm bin/isopod-pool bin/isopod-run
# t/17-jail.bats' programs (see below)
JAILTEST = build/jail/probe build/jail/isopod-jail-mutant
HOSTLIB = lib/util.o lib/bootopt.o lib/runopt.o lib/digest.o lib/jsonio.o lib/utf8.o lib/proc.o lib/launch.o lib/qemu.o lib/ovtpl.o lib/conlog.o lib/image.o lib/accel.o lib/accelhost.o lib/tsc.o lib/frame.o lib/treestream.o lib/treeio.o lib/host.o lib/stage.o lib/qmp.o lib/tree.o lib/warm.o lib/warmpool.o lib/warmtpl.o lib/net.o lib/taphold.o lib/allow.o lib/egress.o lib/dns.o lib/http.o lib/ranges.o lib/dsse.o lib/vm.o lib/job.o lib/slurmjob.o lib/execopt.o lib/execio.o lib/execbulk.o lib/exectree.o lib/tcread.o lib/nldump.o lib/jsonrpc.o lib/cgroup.o lib/jail.o lib/jaildeps.o lib/jailchild.o lib/qjail.o lib/attcheck.o lib/config.o lib/gcauto.o lib/propose.o lib/psl.o lib/pool.o lib/vmstop.o
# Only the tools that read nftables link libnftnl: ruleset.o on its own.
NETLIB = lib/ruleset.o
# isopod-netsetup's own: the taps and routing rules (rtnetlink), the tables.
NSLIB = lib/netslot.o lib/nftbuild.o lib/nftexpr.o lib/nftjail.o
LIBHDR = lib/util.h lib/bootopt.h lib/proc.h lib/launch.h lib/qemu.h lib/ovtpl.h lib/conlog.h lib/image.h lib/accel.h lib/accelhost.h lib/tsc.h lib/frame.h lib/treestream.h lib/treeio.h lib/host.h lib/stage.h lib/qmp.h lib/tree.h lib/warm.h lib/warmpool.h lib/net.h lib/allow.h lib/egress.h lib/dns.h lib/http.h lib/ranges.h lib/dsse.h lib/ruleset.h lib/vm.h lib/tcfilter.h lib/attest.h lib/subjects.h lib/report.h lib/job.h lib/slurmjob.h lib/execopt.h lib/execio.h lib/adverse.h lib/advprobe.h lib/nldump.h lib/netslot.h lib/nftbuild.h lib/nftexpr.h lib/jsonrpc.h lib/jschema.h lib/mcptools.h lib/cgroup.h lib/jail.h lib/jailchild.h lib/qjail.h lib/attcheck.h lib/config.h lib/gcauto.h lib/gcstore.h lib/mcpcall.h lib/propose.h lib/psl.h lib/bpfdeny.h lib/pool.h lib/vmstop.h

# Preloaded into a warm clone's QEMU only (lib/qemu.c qemu_clone_env): it
# opens the snapshot's memory file read-only.  Beside the tools, where the
# supervisor looks for it.
MEMRO = bin/isopod-memro.so

# The run options of isopod-boot and isopod-exec (--run-options=text) beside
# them: the front end reads these (when newer than the tool) instead of
# asking the tool, a process, on a run given one of its options.
RUNOPTS = bin/isopod-boot.run-options bin/isopod-exec.run-options

all: $(TOOLS) $(MEMRO) $(RUNOPTS) agent/isopod-agent build/initramfs.cpio sh/isopod.out $(JAILTEST)

bin/isopod-%.run-options: bin/isopod-%
	./$< --run-options=text >$@.tmp && mv $@.tmp $@

$(MEMRO): lib/memro.c lib/qemu.h
	$(CC) $(ALL_CFLAGS) -fPIC -shared -o $@ lib/memro.c

$(HOSTLIB) $(NETLIB) $(NSLIB): $(LIBHDR)

lib/%.o: lib/%.c $(LIBHDR)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

bin/isopod-%: bin/isopod-%.c $(HOSTLIB) $(LIBHDR)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(HOSTLIB) $(LDLIBS_HOST)

# isopod-run's start is the front end's own time on every run (sh/isopod
# execs it): it links what it uses, not every library and libsodium.
RUNLIB = lib/util.o lib/proc.o lib/runopt.o lib/utf8.o lib/jsonio.o
bin/isopod-run: bin/isopod-run.c $(RUNLIB) $(LIBHDR)
	$(CC) $(ALL_CFLAGS) -o $@ bin/isopod-run.c $(RUNLIB) -ljansson

# isopod-broker's modules (lib/broker.h): only the broker links them.
BROKERLIB = lib/ledger.o lib/canary.o lib/policy.o lib/broker.o lib/dnsfwd.o lib/proxy.o
BROKERHDR = lib/ledger.h lib/canary.h lib/policy.h lib/broker.h lib/dnsfwd.h lib/proxy.h

$(BROKERLIB): $(LIBHDR) $(BROKERHDR)

bin/isopod-broker: bin/isopod-broker.c $(HOSTLIB) $(BROKERLIB) $(LIBHDR) $(BROKERHDR)
	$(CC) $(ALL_CFLAGS) -o $@ bin/isopod-broker.c $(HOSTLIB) $(BROKERLIB) $(LDLIBS_HOST)

# isopod-gc's sweeps of the store's space (lib/gcstore.h): only gc links them.
GCLIB = lib/gcstore.o lib/gcjail.o
$(GCLIB): $(LIBHDR)

bin/isopod-gc: bin/isopod-gc.c $(HOSTLIB) $(GCLIB) $(LIBHDR)
	$(CC) $(ALL_CFLAGS) -o $@ bin/isopod-gc.c $(GCLIB) $(HOSTLIB) $(LDLIBS_HOST)

# isopod-oci's manifest codec and registry client (lib/oci.h, lib/ocireg.h):
# only isopod-oci links them, and libcurl.
OCILIB = lib/oci.o lib/ocireg.o
$(OCILIB): $(LIBHDR) lib/oci.h lib/ocireg.h

bin/isopod-oci: bin/isopod-oci.c $(HOSTLIB) $(OCILIB) $(LIBHDR) lib/oci.h lib/ocireg.h
	$(CC) $(ALL_CFLAGS) -o $@ bin/isopod-oci.c $(OCILIB) $(HOSTLIB) $(LDLIBS_HOST) -lcurl

# isopod-mcp's tool table, the schema check of its arguments and its
# calls' lifecycle (lib/mcptools.h, lib/jschema.h, lib/mcpcall.h): only the
# MCP server links them.
MCPLIB = lib/mcptools.o lib/jschema.o lib/mcpcall.o
$(MCPLIB): $(LIBHDR)

bin/isopod-mcp: bin/isopod-mcp.c $(HOSTLIB) $(MCPLIB) $(LIBHDR)
	$(CC) $(ALL_CFLAGS) -o $@ bin/isopod-mcp.c $(MCPLIB) $(HOSTLIB) $(LDLIBS_HOST)

# What netsetup wrote, recorded by it and compared by the doctor
# (lib/netstate.c reads the tables back with lib/ruleset.c: libnftnl).
NETSTATELIB = lib/netstate.o $(NETLIB)
lib/netstate.o: lib/netstate.c lib/netstate.h $(LIBHDR)
	$(CC) $(ALL_CFLAGS) -c -o $@ lib/netstate.c

# The only tool that talks netfilter: its own link flags.
bin/isopod-netsetup: bin/isopod-netsetup.c $(NSLIB) $(HOSTLIB) $(LIBHDR) $(TCLIB) lib/tcfilter.h $(NETSTATELIB) lib/netstate.h
	$(CC) $(ALL_CFLAGS) -o $@ bin/isopod-netsetup.c $(NSLIB) $(HOSTLIB) $(TCLIB) $(NETSTATELIB) $(LDLIBS_HOST) $(LDLIBS_NET)

# Debug info stripped, BTF kept (the kernel needs it for the program's .rodata).
lib/tapfilter.bpf.o: lib/tapfilter.bpf.c
	$(BPFCC) $(BPF_CFLAGS) -c -o $@ lib/tapfilter.bpf.c
	llvm-strip -g $@

lib/tapfilter_obj.o: lib/tapfilter_obj.S lib/tapfilter.bpf.o
	$(CC) -c -o $@ lib/tapfilter_obj.S

lib/tcfilter.o: lib/tcfilter.c lib/tcfilter.h
	$(CC) $(ALL_CFLAGS) -c -o $@ lib/tcfilter.c

# Reads isopod's tables back (lib/ruleset.c) for an attestation's subject;
# its work is lib/attest.c (the runner will link it too).
ATTESTLIB = lib/attest.o lib/subjects.o lib/report.o lib/suite.o
$(ATTESTLIB): $(LIBHDR) lib/suite.h

bin/isopod-attest: bin/isopod-attest.c $(HOSTLIB) $(NETLIB) $(ATTESTLIB) $(LIBHDR)
	$(CC) $(ALL_CFLAGS) -o $@ bin/isopod-attest.c $(ATTESTLIB) $(HOSTLIB) $(NETLIB) $(LDLIBS_HOST) $(LDLIBS_NET)

# Provenance for what runs copy out: signed with isopod-attest's key
# (lib/attest.c, which verifies the host attestation in force: libnftnl);
# the Statement's reader lib/prov.c, a directory's check lib/provtree.c.
PROVLIB = lib/prov.o lib/provtree.o
lib/prov.o: lib/prov.c lib/prov.h $(LIBHDR)
	$(CC) $(ALL_CFLAGS) -c -o $@ lib/prov.c
lib/provtree.o: lib/provtree.c lib/provtree.h lib/prov.h $(LIBHDR)
	$(CC) $(ALL_CFLAGS) -c -o $@ lib/provtree.c

bin/isopod-provenance: bin/isopod-provenance.c $(HOSTLIB) $(NETLIB) $(ATTESTLIB) $(PROVLIB) $(LIBHDR) lib/prov.h lib/provtree.h
	$(CC) $(ALL_CFLAGS) -o $@ bin/isopod-provenance.c $(PROVLIB) $(ATTESTLIB) $(HOSTLIB) $(NETLIB) $(LDLIBS_HOST) $(LDLIBS_NET)

# The adverse doctor (lib/adverse.c, lib/advprobe.c, lib/advclass.c,
# lib/advevid.c) watches frames
# (lib/sniff.c) and reads the tables back.
DOCTORLIB = lib/adverse.o lib/advprobe.o lib/advclass.o lib/advevid.o lib/advhost.o lib/sniff.o lib/suite.o
lib/sniff.o: lib/sniff.c lib/sniff.h
	$(CC) $(ALL_CFLAGS) -c -o $@ lib/sniff.c
lib/advprobe.o: lib/sniff.h lib/ruleset.h
lib/advclass.o lib/advevid.o: lib/sniff.h
lib/advhost.o: lib/netstate.h

# (and compares the tables, rules and filters with netsetup's record:
# lib/netstate.c, libnftnl; not libbpf: lib/tcread.c reads the filters)
bin/isopod-doctor: bin/isopod-doctor.c $(HOSTLIB) $(DOCTORLIB) $(NETSTATELIB) $(LIBHDR) lib/sniff.h lib/netstate.h lib/suite.h
	$(CC) $(ALL_CFLAGS) -o $@ bin/isopod-doctor.c $(DOCTORLIB) $(NETSTATELIB) $(HOSTLIB) $(LDLIBS_HOST) -lnftnl -lmnl

# t/17-jail.bats: its probe (static, so the jail needs no libraries for it)
# and isopod-jail's mutant: the same sources with -DJAIL_MUTANT, the only
# build where ISOPOD_JAIL_MUTANT can break the jail on purpose (lib/jail.c,
# lib/jailchild.c).
build/jail/probe: t/jail/probe.c
	@mkdir -p build/jail
	$(MUSLCC) -static -Os $(WARN) -std=c11 -D_GNU_SOURCE -o $@ t/jail/probe.c

build/jail/isopod-jail-mutant: bin/isopod-jail.c lib/jail.c lib/jailchild.c $(HOSTLIB) $(LIBHDR)
	@mkdir -p build/jail
	$(CC) $(ALL_CFLAGS) -DJAIL_MUTANT -o $@ bin/isopod-jail.c lib/jail.c lib/jailchild.c \
		$(filter-out lib/jail.o lib/jailchild.o,$(HOSTLIB)) $(LDLIBS_HOST)

# The agent: static musl, PID 1.  It links frame.c and the tree stream
# (treestream.c, treeio.c), libc only, and nothing else of lib/.
AGENTSRC = agent/main.c agent/port.c agent/out.c agent/request.c agent/hello.c agent/pid1.c \
	agent/exec.c agent/file.c agent/bulk.c
# GCC's -Os inlines a memcpy of unknown length as rep movsb, emulated a
# byte at a time under TCG (doc/SPEED.md "Goal 4, a cold copy-out"): the
# option makes it call musl's memcpy.  GCC's only, so asked of MUSLCC
# first (a clang MUSLCC goes without); `=` runs the check only here.
AGENT_STRINGOP = $(shell $(MUSLCC) -mstringop-strategy=libcall -E -x c /dev/null >/dev/null 2>&1 && echo -mstringop-strategy=libcall)
agent/isopod-agent: $(AGENTSRC) agent/agent.h lib/frame.c lib/frame.h lib/treestream.c lib/treestream.h lib/treeio.c lib/treeio.h
	$(MUSLCC) -static -Os $(AGENT_STRINGOP) $(WARN) -std=c11 -D_GNU_SOURCE -Ilib -o $@ $(AGENTSRC) lib/frame.c lib/treestream.c lib/treeio.c

# Reproducible, no root needed, works before any kernel is built and needs
# nothing but a shell (images/mkinitramfs writes the cpio itself, no cache).
build/initramfs.cpio: agent/isopod-agent images/mkinitramfs images/lib.sh
	mkdir -p build
	sh images/mkinitramfs agent/isopod-agent $@

sh/isopod.out: sh/isopod
	cp sh/isopod $@ && chmod 755 $@

# Kernel and base images (each cached by input hash outside the repo, in
# $ISOPOD_CACHE), then registration in the store $ISOPOD_HOME (images/register).
# The debian flavor (a cold build downloads ~220 MB from the host's Debian
# mirror and takes ~3.5 min) unless ISOPOD_DEBIAN=0.
# The kernel builds beside the base images: it is the CPU's (~6 min at -j
# nproc on a fresh CI machine), debootstrap mostly waits on the mirror and
# the disk, and neither reads the other's output.  The kernel's own log is
# its cache entry's build.log; a failure of either fails the target, and
# the kernel is waited for either way (no build left running).
images: all
	sh images/build-kernel & k=$$!; st=0; \
	sh images/build-base base || st=$$?; \
	if [ $$st = 0 ] && [ "$${ISOPOD_DEBIAN:-1}" != 0 ]; then sh images/build-base debian || st=$$?; fi; \
	wait $$k || st=$$?; \
	exit $$st
	sh images/register

# The host tools again with ASan + UBSan, for t/60-asan.bats (make check).
# -Wno-format-truncation: at -O1 gcc's range analysis flags snprintf calls the
# -O2 build proves safe; that build keeps the warning as an error.
ASAN_CFLAGS = -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined -Wno-format-truncation
# Each library source is compiled once for all the tools (a tool links every
# object, as its -O2 build links what it uses): one compile per tool and
# library was 18 x 35 compiles, minutes of CI.
ASAN_SRC = $(sort $(HOSTLIB:.o=.c) $(BROKERLIB:.o=.c) $(filter-out lib/mcpcall.c,$(MCPLIB:.o=.c)) $(GCLIB:.o=.c) $(NETLIB:.o=.c) $(NSLIB:.o=.c) lib/netstate.c $(ATTESTLIB:.o=.c) $(PROVLIB:.o=.c) $(DOCTORLIB:.o=.c) $(OCILIB:.o=.c) lib/tcfilter.c)
ASAN_OBJ = $(ASAN_SRC:%.c=build/asan/%.o)
build/asan/lib/%.o: lib/%.c $(LIBHDR)
	@mkdir -p build/asan/lib
	$(CC) $(WARN) $(ASAN_CFLAGS) -std=c11 -D_GNU_SOURCE -Ilib -c -o $@ $<

# lib/mcpcall.c calls isopod-mcp's output functions (lib/mcpcall.h), so
# only that tool links it.
asan: $(TOOLS) $(MEMRO) $(ASAN_OBJ) build/asan/lib/mcpcall.o
	mkdir -p build/asan/bin
	cp $(MEMRO) build/asan/bin/ # beside the supervisor: a warm clone's QEMU preloads it
	for t in $(TOOLS); do \
		$(CC) $(WARN) $(ASAN_CFLAGS) -std=c11 -D_GNU_SOURCE -Ilib -o build/asan/$$t \
			$$t.c $(ASAN_OBJ) $$(test $$t != bin/isopod-mcp || echo build/asan/lib/mcpcall.o) \
			lib/tapfilter_obj.o $(LDLIBS_HOST) $(LDLIBS_NET) -lcurl || exit 1; \
	done

check: all asan
	sh t/run-unit
	sh t/run-bats

fuzz:
	sh fuzz/run

bench: all
	sh bench/run
	sh bench/compare
	sh bench/scale

install: all
	mkdir -p $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(MANDIR)/man1
	for t in $(TOOLS) $(MEMRO); do cp $$t $(DESTDIR)$(BINDIR)/; done
	for t in $(RUNOPTS); do cp $$t $(DESTDIR)$(BINDIR)/; done # after: newer
	cp sh/isopod $(DESTDIR)$(BINDIR)/isopod
	cp agent/isopod-agent build/initramfs.cpio $(DESTDIR)$(LIBEXECDIR)/
	cp -R images $(DESTDIR)$(LIBEXECDIR)/
	cp man/*.1 $(DESTDIR)$(MANDIR)/man1/
	mkdir -p $(DESTDIR)$(MANDIR)/man8
	cp man/*.8 $(DESTDIR)$(MANDIR)/man8/

clean:
	rm -f $(TOOLS) $(MEMRO) $(RUNOPTS) lib/*.o agent/isopod-agent sh/isopod.out
	rm -rf build

.PHONY: all images check asan fuzz bench install clean
