/* prov_fuzz.c - libFuzzer target for lib/prov.c, the reader of the
 * provenance Statements isopod-provenance verify reads from files it did
 * not make (the signature is dsse_fuzz's; a Statement signed by another
 * key the verifier was handed is read all the same).  The input, through
 * the tools' JSON loader, must never crash prov_read; a Statement that reads
 * clean must have given its subject, kernel and base, and its chain must
 * compare equal to itself; the entries of a directory copied out as
 * "tree" (verify of a directory: prov_read without a digest, then
 * prov_tree_entries) read without a crash too.  See fuzz/run. */
#include "prov.h"
#include "util.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char sha[] = "8748d29207a02184fdb6794bada9aef0e413b91431c93a1b00100cc371e56b47";
	json_t *stmt, *fails, *out, *chain;
	char why[256];

	if (!(stmt = json_parse((const char *)data, size, 0, why, sizeof why)))
		return 0;
	fails = json_array();
	if (!fails || !(out = prov_read(stmt, sha, fails)))
		abort();
	chain = json_object_get(out, "chain");
	if (json_array_size(fails) == 0 &&
	    (json_is_null(json_object_get(out, "subject")) ||
	     json_is_null(json_object_get(chain, "kernel")) || json_is_null(json_object_get(chain, "base")) ||
	     prov_chain_compare(chain, chain, fails) != 0))
		abort();
	json_decref(out);
	json_array_clear(fails);
	if (!(out = prov_read(stmt, NULL, fails)))
		abort();
	json_decref(out);
	if (!(out = prov_tree_entries(stmt, "tree", fails)))
		abort();
	json_decref(out);
	json_decref(fails);
	json_decref(stmt);
	return 0;
}
