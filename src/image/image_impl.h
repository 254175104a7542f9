/*
 * image_impl: what the image room's files share (image.h is its outside).
 */
#ifndef CPUOS_IMAGE_IMPL_H
#define CPUOS_IMAGE_IMPL_H

#include <linux/openat2.h>

/* Beneath dirfd, no symlink followed, no /proc magic, no other mount:
 * how an image's names are opened everywhere here. */
#define IMAGE_STRICT (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

/* openat2(dirfd, path ("" is dirfd itself), flags | O_CLOEXEC, mode 0644
 * when creating, resolve): the descriptor, or -errno. */
int image__open(int dirfd, const char *path, int flags, unsigned long long resolve);

/* Whether ip (text, v4 or v6) is one of the host's own or of a private
 * network: loopback, unspecified, RFC 1918, CGNAT, link-local (cloud
 * metadata), IETF and benchmarking ranges, unique-local, multicast, and
 * those inside v6 (mapped, NAT64, 6to4, compatible); what is no address
 * counts as one. */
int image__inward(const char *ip);

#endif
