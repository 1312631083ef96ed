/* suite.c - the doctor's adverse suite, per mode (suite.h). */
#include "suite.h"

const struct suite_mode *suite_modes(size_t *n)
{
	/* none: the VM has no NIC; filtered: the broker's mode, which also
	 * forwards nothing and resolves only what is listed; open: forwarded,
	 * but never to metadata, the denied blocks or the gateway's other
	 * ports. */
	static const struct suite_mode tab[] = {
		{ .mode = "none", .classes = { "none", NULL } },
		{ .mode = "filtered",
		  .classes = { "metadata", "denied-range", "gateway-port", "filtered-forwarding",
			       "dns-exfiltration", "spoof-ip", "spoof-mac", "arp-gateway", "ipv6",
			       "dns-rebinding", NULL } },
		{ .mode = "open",
		  .classes = { "metadata", "denied-range", "gateway-port", "spoof-ip", "spoof-mac",
			       "arp-gateway", "ipv6", NULL } },
	};

	*n = sizeof tab / sizeof *tab;
	return tab;
}
