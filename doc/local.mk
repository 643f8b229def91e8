# The design documents ship with the source: every doc/*.md is listed here, and dist-hook
# (below) fails `make dist` when one is not, so a new document cannot be left out of the tarball.
doc_md = doc/architecture.md doc/security.md doc/cli.md doc/style.md doc/api.md doc/ci-runners.md \
	doc/catalog.md doc/crash-points.md doc/egress-proxy.md doc/guest-channel.md doc/helper.md \
	doc/performance.md doc/secrets.md doc/sigv4.md doc/ssh-agent.md doc/storage.md doc/vm.md \
	doc/workspace.md doc/residue.md doc/browser.md
EXTRA_DIST += $(doc_md)
dist-hook: dist-doc-check
dist-doc-check:
	@missing=; for f in $(srcdir)/doc/*.md; do \
	  test -f "$(distdir)/doc/$${f##*/}" || missing="$$missing doc/$${f##*/}"; \
	done; \
	if test -n "$$missing"; then \
	  echo "make dist: not in doc_md (doc/local.mk):$$missing" >&2; exit 1; \
	fi
.PHONY: dist-doc-check

# The man pages name the directories this build uses: each is made from its .in
# template with the paths configure chose, as the systemd units are (systemd_subst), with the
# hyphens escaped for troff. A --with-*dir=no leaves the page naming the usual directory.
slate_man_pages = doc/slate.1 doc/slated.8 doc/slate.conf.5 doc/slate-catalog.1 doc/slate-catalog.5
man_MANS += $(slate_man_pages)
EXTRA_DIST += $(slate_man_pages:=.in)
CLEANFILES += $(slate_man_pages)
man_gen = $(AM_V_GEN)$(MKDIR_P) $(@D) && \
	e() { printf '%s' "$$1" | $(SED) 's/-/\\\\-/g'; } && \
	units='$(systemdsystemunitdir)' tmpfiles='$(tmpfilesdir)' sysusers='$(sysusersdir)' \
	completions='$(bashcompletiondir)' && \
	$(SED) -e 's|@PACKAGE_VERSION[@]|$(PACKAGE_VERSION)|g' \
	-e "s|@bindir[@]|$$(e '$(bindir)')|g" \
	-e "s|@sysconfdir[@]|$$(e '$(sysconfdir)')|g" \
	-e "s|@localstatedir[@]|$$(e '$(localstatedir)')|g" \
	-e "s|@pkgdatadir[@]|$$(e '$(pkgdatadir)')|g" \
	-e "s|@pkglibexecdir[@]|$$(e '$(pkglibexecdir)')|g" \
	-e "s|@runtimedir[@]|$$(e '$(slate_runtimedir)')|g" \
	-e "s|@systemdsystemunitdir[@]|$$(e "$${units:-/lib/systemd/system}")|g" \
	-e "s|@tmpfilesdir[@]|$$(e "$${tmpfiles:-/usr/lib/tmpfiles.d}")|g" \
	-e "s|@sysusersdir[@]|$$(e "$${sysusers:-/usr/lib/sysusers.d}")|g" \
	-e "s|@bashcompletiondir[@]|$$(e "$${completions:-/usr/share/bash-completion/completions}")|g" \
	$(srcdir)/$@.in >$@.tmp && \
	if grep -n '@[a-zA-Z_]*@' $@.tmp; then echo "$@: unsubstituted" >&2; rm -f $@.tmp; exit 1; fi && \
	mv $@.tmp $@
doc/slate.1: $(srcdir)/doc/slate.1.in Makefile
	$(man_gen)
doc/slated.8: $(srcdir)/doc/slated.8.in Makefile
	$(man_gen)
doc/slate.conf.5: $(srcdir)/doc/slate.conf.5.in Makefile
	$(man_gen)
doc/slate-catalog.1: $(srcdir)/doc/slate-catalog.1.in Makefile
	$(man_gen)
doc/slate-catalog.5: $(srcdir)/doc/slate-catalog.5.in Makefile
	$(man_gen)
