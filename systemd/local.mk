# systemd/: units, tmpfiles.d, sysusers.d (slated(8)), the bash completion, slate.conf(5), and
# the tests that check them without systemd as PID 1.

# The runtime directory is fixed at /run/slate (AM_CPPFLAGS' SLATE_RUNTIME_DIR); the state
# directory follows localstatedir as slated's default does. systemd-units.test checks that the
# units and slated agree.
slate_runtimedir = /run/slate
systemd_subst = $(SED) \
	-e 's|@sbindir[@]|$(sbindir)|g' \
	-e 's|@pkglibexecdir[@]|$(pkglibexecdir)|g' \
	-e 's|@localstatedir[@]|$(localstatedir)|g' \
	-e 's|@sysconfdir[@]|$(sysconfdir)|g' \
	-e 's|@runtimedir[@]|$(slate_runtimedir)|g'
systemd_generated = systemd/slated.service systemd/slated.socket systemd/tmpfiles.d/slate.conf \
	systemd/slated-helper.service systemd/slated-helper.socket
systemd/slated.service: $(srcdir)/systemd/slated.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(systemd_subst) $(srcdir)/systemd/slated.service.in >$@.tmp && mv $@.tmp $@
systemd/slated.socket: $(srcdir)/systemd/slated.socket.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(systemd_subst) $(srcdir)/systemd/slated.socket.in >$@.tmp && mv $@.tmp $@
systemd/slated-helper.service: $(srcdir)/systemd/slated-helper.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(systemd_subst) $(srcdir)/systemd/slated-helper.service.in >$@.tmp && mv $@.tmp $@
systemd/slated-helper.socket: $(srcdir)/systemd/slated-helper.socket.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(systemd_subst) $(srcdir)/systemd/slated-helper.socket.in >$@.tmp && mv $@.tmp $@
systemd/tmpfiles.d/slate.conf: $(srcdir)/systemd/tmpfiles.d/slate.conf.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(systemd_subst) $(srcdir)/systemd/tmpfiles.d/slate.conf.in >$@.tmp && mv $@.tmp $@
CLEANFILES += $(systemd_generated)
EXTRA_DIST += systemd/slated.service.in systemd/slated.socket.in systemd/tmpfiles.d/slate.conf.in \
	systemd/slated-helper.service.in systemd/slated-helper.socket.in
# Built with the programs, so that the tests find them and install has nothing left to make.
noinst_DATA = $(systemd_generated)

if HAVE_SYSTEMDSYSTEMUNITDIR
systemdsystemunit_DATA = systemd/slated.service systemd/slated.socket \
	systemd/slated-helper.service systemd/slated-helper.socket
endif
if HAVE_TMPFILESDIR
tmpfiles_DATA = systemd/tmpfiles.d/slate.conf
endif
if HAVE_SYSUSERSDIR
dist_sysusers_DATA = systemd/sysusers.d/slate.conf
else
EXTRA_DIST += systemd/sysusers.d/slate.conf
endif
if HAVE_BASHCOMPLETIONDIR
dist_bashcompletion_DATA = completions/slate completions/slated
else
EXTRA_DIST += completions/slate completions/slated
endif

# Where make install puts what (tests/unit/install-files.test reads it).
print-install-dirs:
	@echo "bindir=$(bindir)"
	@echo "sbindir=$(sbindir)"
	@echo "libexecdir=$(libexecdir)"
	@echo "pkglibexecdir=$(pkglibexecdir)"
	@echo "pkgdatadir=$(pkgdatadir)"
	@echo "mandir=$(mandir)"
	@echo "systemdsystemunitdir=$(systemdsystemunitdir)"
	@echo "tmpfilesdir=$(tmpfilesdir)"
	@echo "sysusersdir=$(sysusersdir)"
	@echo "bashcompletiondir=$(bashcompletiondir)"
.PHONY: print-install-dirs

# The units pass systemd-analyze verify and their exposure score is printed (and held);
# socket activation, sd_notify and logging without journald against the real slated; make
# install into a DESTDIR; the completion against the real client.
unit_tests += tests/unit/systemd-units.test tests/unit/systemd-activation.test \
	tests/unit/install-files.test tests/unit/install-completion.test
EXTRA_DIST += tests/unit/systemd-units.test tests/unit/systemd-activation.test \
	tests/unit/install-files.test tests/unit/install-completion.test \
	tests/unit/systemd-notify.py
