# vm/: libvirt domains: the domain XML (libxml2 on libvirt-xml/domain.xml), the KVM probe,
# lifecycle (boot, stop, suspend), domain events.
src_libslate_libslate_la_SOURCES += \
	src/libslate/vm/domain.c src/libslate/vm/domain.h \
	src/libslate/vm/xml.c src/libslate/vm/xml.h \
	src/libslate/vm/kvm.c src/libslate/vm/kvm.h \
	src/libslate/vm/qemu-user.c src/libslate/vm/qemu-user.h \
	src/libslate/vm/define-time.c src/libslate/vm/define-time.h \
	src/libslate/vm/virtiofs.c src/libslate/vm/virtiofs.h \
	src/libslate/vm/lifecycle.c src/libslate/vm/lifecycle.h \
	src/libslate/vm/savefile.c src/libslate/vm/savefile.h \
	src/libslate/vm/events.c src/libslate/vm/events.h
# The template is built into the programs as a C string (xml.c includes it), so an uninstalled
# slated works; /etc/slate/libvirt-xml/domain.xml overrides it. Installed for administrators to
# read and copy.
src_libslate_libslate_la_CFLAGS += -I$(top_builddir)/src/libslate
src/libslate/vm/domain-template.inc: $(top_srcdir)/libvirt-xml/domain.xml
	$(AM_V_GEN)$(MKDIR_P) $(@D) && { \
	  echo '/* Generated from libvirt-xml/domain.xml by src/libslate/vm/local.mk. */'; \
	  echo 'static const char vm_domain_template[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/\t"/' -e 's/$$/\\n"/' \
	    $(top_srcdir)/libvirt-xml/domain.xml; \
	  echo ';'; } >$@.tmp && mv $@.tmp $@
# (Through a variable: automake would take the object's own name as a rule to override.)
vm_xml_object = src/libslate/vm/libslate_la-xml.lo
$(vm_xml_object): src/libslate/vm/domain-template.inc
CLEANFILES += src/libslate/vm/domain-template.inc
libvirtxmldir = $(pkgdatadir)/libvirt-xml
libvirtxml_DATA = libvirt-xml/domain.xml
EXTRA_DIST += doc/vm.md

# The domain XML: built from the template, parsed back, every value checked.
unit_programs += tests/unit/test-vm-xml

# The user QEMU runs as, and the directories it must be able to search.
unit_programs += tests/unit/test-qemu-user

# The doctor's verdict on a slow define: the cause and the remedy.
unit_programs += tests/unit/test-define-time

# Start, stop, suspend/resume, console, events and daemon restarts on the test image (TCG).
integration_tests += tests/integration/vm.sh
EXTRA_DIST += tests/integration/vm.sh

# Starts from a booted snapshot: made, restored into two different machines, the cold fallbacks,
# boot-snapshots = auto (daemon/snapshot.c, vm/savefile.c).
integration_tests += tests/integration/snapshot.sh
EXTRA_DIST += tests/integration/snapshot.sh
# An existing test, unchanged, with its workspace restored instead of booted.
integration_tests += tests/integration/restored-secrets-guest.sh
EXTRA_DIST += tests/integration/restored-secrets-guest.sh

# Shares: the path walk that refuses symlinks and owner changes, and virtiofsd as the owner.
unit_programs += tests/unit/test-virtiofs

# libvirt's save image (starts from a booted snapshot): synthetic images parsed, refused and
# rewritten (aligned and in place, the stream bytes compared).
unit_programs += tests/unit/test-savefile

# Its libFuzzer target (the parser and the rewrite's round trip) and the corpus replayed as a
# unit test. tests/fuzz/savefile-seeds.py made the seeds.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-savefile
tests_fuzz_fuzz_savefile_SOURCES = tests/fuzz/fuzz-savefile.c src/libslate/vm/savefile.c
tests_fuzz_fuzz_savefile_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_savefile_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_savefile_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-savefile
tests_unit_test_fuzz_corpus_savefile_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-savefile.c
EXTRA_DIST += tests/fuzz/savefile-seeds.py
