# images/: the test image (Debian packages -> kernel, initramfs, reproducible ext4 disk) and the
# helper that boots it under libvirt. See images/test/build and images/test/boot.
TEST_IMAGE_DIR = $(abs_top_builddir)/images/test/out
EXTRA_DIST += images/test/build images/test/init images/test/initramfs-init images/test/boot \
	images/test/demo

# The production recipe: Ubuntu 24.04's catalog entry, the script that fills it in, its steps.
EXTRA_DIST += images/ubuntu-24.04/README.md images/ubuntu-24.04/entry.json.in \
	images/ubuntu-24.04/make-entry images/ubuntu-24.04/steps/10-grow-root.sh \
	images/ubuntu-24.04/steps/20-slate-guest.sh images/ubuntu-24.04/steps/30-user-home.sh \
	images/ubuntu-24.04/steps/40-egress-ca.sh images/ubuntu-24.04/steps/50-proxy.sh \
	images/ubuntu-24.04/steps/60-no-bypass.sh

# What the integration tests use inside the guest: curl (the egress proxy), the
# OpenSSH client tools (the SSH agent), git and bash (the GitLab Runner driver: its job
# scripts are bash, get_sources clones with git over HTTPS through the proxy).
TEST_IMAGE_PACKAGES = curl openssh-client git bash
# images/test/build does nothing when its recorded inputs (packages, slate-guest, scripts) match.
test-image: slate-guest$(EXEEXT)
	top_builddir=$(abs_top_builddir) $(top_srcdir)/images/test/build --out $(TEST_IMAGE_DIR) \
		--slate-guest $(abs_top_builddir)/slate-guest$(EXEEXT) $(TEST_IMAGE_PACKAGES:%=--add-package %)

# The README's main job: a private slated runs `slate run --rm -- uname -a` on the test image (as
# root: qemu:///system), and the disposable workspace goes again.
demo: test-image slated$(EXEEXT) slate$(EXEEXT)
	top_builddir=$(abs_top_builddir) $(top_srcdir)/images/test/demo --image-dir $(TEST_IMAGE_DIR) \
		-- uname -a

# Removes the built image and its package cache.
clean-test-image:
	rm -rf $(TEST_IMAGE_DIR)

# The installer VM that runs postinstall steps boots the test image's kernel and initramfs
# (src/libslate/image/postinstall.c looks in <state>/installer, then $(installerdir)). make
# install puts them there when the test image is built ("make test-image", or INSTALLER_SOURCE
# naming a directory with vmlinuz and initrd.img); it never builds the image itself (that needs
# apt-get and the network: packagers' sandboxes and non-Debian hosts have neither) and says so
# instead. "make install-installer" builds the test image first, then installs them.
installerdir = $(pkgdatadir)/installer
INSTALLER_SOURCE = $(TEST_IMAGE_DIR)
install-data-local: install-installer-files
uninstall-local: uninstall-installer-files
install-installer-files:
	@if test -f "$(INSTALLER_SOURCE)/vmlinuz" && test -f "$(INSTALLER_SOURCE)/initrd.img"; then \
	  echo " $(MKDIR_P) '$(DESTDIR)$(installerdir)'"; \
	  $(MKDIR_P) "$(DESTDIR)$(installerdir)" || exit 1; \
	  for f in vmlinuz initrd.img; do \
	    echo " $(INSTALL_DATA) '$(INSTALLER_SOURCE)/$$f' '$(DESTDIR)$(installerdir)/$$f'"; \
	    $(INSTALL_DATA) "$(INSTALLER_SOURCE)/$$f" "$(DESTDIR)$(installerdir)/$$f" || exit 1; \
	  done; \
	else \
	  echo "note: no installer kernel installed ($(INSTALLER_SOURCE) has no vmlinuz and initrd.img):"; \
	  echo "note: postinstall steps will fail until 'make install-installer' (which builds the"; \
	  echo "note: test image) or until vmlinuz and initrd.img are put in $(installerdir)"; \
	fi
install-installer: test-image
	$(MAKE) $(AM_MAKEFLAGS) install-installer-files
uninstall-installer-files:
	rm -f "$(DESTDIR)$(installerdir)/vmlinuz" "$(DESTDIR)$(installerdir)/initrd.img"
	-rmdir "$(DESTDIR)$(installerdir)" 2>/dev/null

# The browser image (issue 24, images/browser/README.md): the test image's recipe with
# chromium-headless-shell, on a 1 GiB disk. Like test-image, it does nothing when its inputs match.
BROWSER_IMAGE_DIR = $(abs_top_builddir)/images/browser/out
EXTRA_DIST += images/browser/build images/browser/README.md
browser-image: slate-guest$(EXEEXT)
	top_builddir=$(abs_top_builddir) $(top_srcdir)/images/browser/build --out $(BROWSER_IMAGE_DIR) \
		--slate-guest $(abs_top_builddir)/slate-guest$(EXEEXT)

# Removes the built browser image and its package cache.
clean-browser-image:
	rm -rf $(BROWSER_IMAGE_DIR)

.PHONY: test-image demo clean-test-image install-installer install-installer-files \
	uninstall-installer-files browser-image clean-browser-image
