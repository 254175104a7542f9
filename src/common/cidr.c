/*
 * cidr: address ranges as the API and nftables spell them, read strictly
 * (plain decimal prefixes, no host bits) so that what a client wrote is
 * what is enforced.
 */
#include "common/cidr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static unsigned addr_bits(int family)
{
	return family == AF_INET ? 32 : family == AF_INET6 ? 128 : 0;
}

int net_cidr_parse(const char *s, struct net_cidr *out)
{
	char buf[INET6_ADDRSTRLEN];
	struct net_cidr c = { 0 };
	const char *slash = s ? strchr(s, '/') : NULL;
	size_t alen = !s ? 0 : slash ? (size_t)(slash - s) : strlen(s);
	if (alen == 0 || alen >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, alen);
	buf[alen] = '\0';
	if (inet_pton(AF_INET, buf, c.addr) == 1)
		c.family = AF_INET;
	else if (inet_pton(AF_INET6, buf, c.addr) == 1)
		c.family = AF_INET6;
	else
		return -EINVAL;
	unsigned max = addr_bits(c.family);
	c.prefix = max;
	if (slash) {
		/* Plain decimal: no sign, space or leading zero. */
		const char *d = slash + 1;
		size_t n = strspn(d, "0123456789");
		if (n == 0 || n > 3 || d[n] || (n > 1 && d[0] == '0') || (unsigned)atoi(d) > max)
			return -EINVAL;
		c.prefix = (unsigned)atoi(d);
	}
	/* "10.0.0.1/8" is refused, not read as 10.0.0.0/8: the client meant
	 * one or the other, and we cannot tell which. */
	for (unsigned bit = c.prefix; bit < max; bit++)
		if (c.addr[bit / 8] & (0x80 >> (bit % 8)))
			return -EINVAL;
	*out = c;
	return 0;
}

void net_cidr_format(const struct net_cidr *c, char *out, size_t n)
{
	char buf[INET6_ADDRSTRLEN];
	if (!addr_bits(c->family) || !inet_ntop(c->family, c->addr, buf, sizeof(buf)))
		snprintf(out, n, "%s", "");
	else
		snprintf(out, n, "%s/%u", buf, c->prefix);
}

int net_cidr_contains(const struct net_cidr *c, int family, const void *addr)
{
	const uint8_t *a = addr;
	unsigned full = c->prefix / 8, rest = c->prefix % 8;
	if (!a || !addr_bits(family) || c->family != family || memcmp(c->addr, a, full))
		return 0;
	uint8_t m = (uint8_t)(0xff << (8 - rest));
	return rest == 0 || (c->addr[full] & m) == (a[full] & m);
}
