/*
 * netpolicy: the fixed ranges (netpolicy.h). Strings, as nftables wants
 * them; the policy's judge parses them on each check.
 */
#include "common/netpolicy.h"

#include <stddef.h>

/* No overlaps within or across the lists: nftables interval sets refuse
 * them. "This network", loopback, link-local (cloud metadata), IETF
 * protocol assignments, multicast, reserved and broadcast; for IPv6 the
 * same plus v4-mapped (IPv4 in disguise) and discard-only. */
const char *const net_always_denied[] = {
	"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "192.0.0.0/24", "224.0.0.0/4", "240.0.0.0/4",
	"::/128", "::1/128", "::ffff:0.0.0.0/96", "fe80::/10", "ff00::/8", "100::/64", NULL,
};

/* RFC 1918, CGNAT (RFC 6598), unique local. */
const char *const net_private_ranges[] = {
	"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7", NULL,
};
