/* exectree.c - a guest directory copied out as a tree stream (execio.h).
 *
 * Every byte of the stream is the guest's: the decoder bounds it (paths,
 * entries, data; treestream.h) and the sink creates below the directory it
 * was given only, never through a symlink, never over what is there, modes
 * & 0777 & ~umask (treeio.h).  The destination is made here and must not exist: no
 * file of the user's is replaced. */
#include "execio.h"
#include "tree.h"
#include "treeio.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the host keeps of a tree as it arrives: the entries the guest
 * skipped, and (s->list_files) each regular file's sha256 of its bytes as
 * they arrive (the holes hashed as the zeros they read as), which
 * isopod-provenance signs each file by after checking the file on the
 * host still holds them, and each symlink's target, which it records
 * beside them (a symlink has no bytes to sign by: review L5).  The lists
 * come out of the session's budgets, the symlinks counted with the files
 * against EXEC_TREE_FILES_MAX. */
struct tree_seen {
	struct exec_session *s;
	json_t *skipped;
	json_t *files;          /* [{path, sha256, bytes}]; NULL once past the bounds */
	json_t *links;          /* [{path, target}]; NULL with files */
	size_t files_cost;      /* what files has taken of s->tree_json_left */
	int skipped_cut;        /* an entry left off skipped */
	crypto_hash_sha256_state h;
	uint64_t size, pos;     /* the file being hashed: its size, hashed so far */
	char path[TS_PATH_MAX + 1];
};

/* Each entry the guest skipped (a device, a hard link): onto the list,
 * while it and the budget have room.  A name may be 4096 control bytes,
 * 6 bytes each escaped: the cost is the entry as serialised. */
static void on_note(void *ctx, const char *path, const char *why)
{
	struct tree_seen *t = ctx;
	json_t *e;
	size_t c;

	if (json_array_size(t->skipped) >= 100) {
		t->skipped_cut = 1;
		return;
	}
	e = json_pack("{s:o, s:o}", "path", utf8_json((const uint8_t *)path, strlen(path), 0),
		      "why", utf8_json((const uint8_t *)why, strlen(why), 0));
	c = e ? exec_json_cost(e) : 0;
	if (!e || c > t->s->tree_json_left || json_array_append_new(t->skipped, e) < 0) {
		if (e && c > t->s->tree_json_left)
			json_decref(e);
		t->skipped_cut = 1;
		return;
	}
	t->s->tree_json_left -= c;
}

/* The list is given up (and no more hashed) past EXEC_TREE_FILES_MAX
 * files, the session's budgets (the list's JSON, the holes hashed), or
 * at a path that is not UTF-8 (a JSON string could not name it): the
 * result stays small, the host's work bounded by what the guest sent,
 * and isopod-provenance refuses such a tree rather than sign part of it.
 * What the list had taken of the budget is given back. */
static void give_up(struct tree_seen *t)
{
	json_decref(t->files);
	json_decref(t->links);
	t->files = t->links = NULL;
	t->s->tree_json_left += t->files_cost;
	t->files_cost = 0;
}

/* n bytes of a hole into the digest: 0, or -1 past the session's
 * EXEC_TREE_HOLES_MAX (a 4 GiB sparse file is 4 GiB of zeros to hash). */
static int hash_zeros(struct tree_seen *t, uint64_t n)
{
	uint8_t z[16384];

	if (n > t->s->tree_holes_left)
		return -1;
	t->s->tree_holes_left -= n;
	memset(z, 0, sizeof z);
	while (n) {
		size_t k = n < sizeof z ? (size_t)n : sizeof z;

		crypto_hash_sha256_update(&t->h, z, k);
		n -= k;
	}
	return 0;
}

/* e (a file's or a symlink's entry, NULL when it could not be built) onto
 * list, charged to the session's JSON budget; past it, or unbuilt, the
 * tree's lists are given up. */
static void list_add(struct tree_seen *t, json_t *list, json_t *e)
{
	size_t c = e ? exec_json_cost(e) : 0;

	if (!e || c > t->s->tree_json_left) {
		json_decref(e);
		give_up(t);
		return;
	}
	if (json_array_append_new(list, e) < 0) {
		give_up(t);
		return;
	}
	t->s->tree_json_left -= c;
	t->files_cost += c;
}

/* Each item the sink applied, in order: the decoder has checked that
 * segments come in order, within the file's size. */
static void on_item(void *ctx, const struct ts_item *it)
{
	struct tree_seen *t = ctx;
	unsigned char md[crypto_hash_sha256_BYTES];
	char sha[65];
	size_t l;

	if (!t->files)
		return;
	switch (it->type) {
	case TS_ENTRY:
		if (it->kind != 'f' && it->kind != 'l')
			return;
		l = strlen(it->path);
		if (json_array_size(t->files) + json_array_size(t->links) >= EXEC_TREE_FILES_MAX ||
		    !utf8_valid(it->path, l)) {
			give_up(t);
			return;
		}
		if (it->kind == 'l') {
			/* a target JSON cannot carry is given up as a name is */
			list_add(t, t->links, utf8_valid(it->target, strlen(it->target)) ?
				 json_pack("{s:s, s:s}", "path", it->path, "target", it->target) : NULL);
			return;
		}
		memcpy(t->path, it->path, l + 1);
		t->size = it->size;
		t->pos = 0;
		crypto_hash_sha256_init(&t->h);
		return;
	case TS_DATA:
		if (hash_zeros(t, it->off - t->pos) < 0) {
			give_up(t);
			return;
		}
		crypto_hash_sha256_update(&t->h, it->data, it->len);
		t->pos = it->off + it->len;
		return;
	case TS_FILE_END:
		if (hash_zeros(t, t->size - t->pos) < 0) {
			give_up(t);
			return;
		}
		crypto_hash_sha256_final(&t->h, md);
		sodium_bin2hex(sha, sizeof sha, md, sizeof md);
		list_add(t, t->files, json_pack("{s:s, s:s, s:I}", "path", t->path, "sha256", sha,
						"bytes", (json_int_t)t->size));
		return;
	case TS_END:
		return;
	}
}

/* Take the frames of the tree stream until FILE_DONE: 1 done, 0 why[] set
 * (the copy-out must end, the vm stopped), 2 the agent's ERROR (msg), or a
 * failure. */
static int take_tree(struct exec_session *s, struct ts_feed *f, uint64_t room, uint64_t *bytes,
		     char *why, size_t wsz, char *msg, size_t msz)
{
	struct frame fr;
	int got;

	while ((got = exec_wait_frame(s, &fr)) == 1) {
		if (fr.type == F_DATA && fr.stream == STREAM_FILE) {
			/* the stream's bytes count, record heads too */
			if (fr.len > room - *bytes) {
				snprintf(why, wsz, "the guest sent more than the %llu bytes allowed "
					 "(--copy-out-max %lld)", (unsigned long long)room,
					 s->copy_out_max);
				return 0;
			}
			*bytes += fr.len;
			if (ts_feed(f, fr.payload, fr.len, why, wsz) < 0)
				return 0;
			continue;
		}
		if (fr.type == F_EOF || fr.type == F_PONG || fr.type == F_CREDIT)
			continue;
		/* none is lent after EXIT (exec_run took them all): a failure */
		if (fr.type == F_BULK_DONE) {
			if (exec_bulk_take(s, &fr) < 0)
				return EXEC_FAILED;
			continue;
		}
		if (fr.type == F_FILE_DONE)
			return 1;
		if (fr.type == F_ERROR) {
			char kind[64];

			frame_error_text(&fr, kind, sizeof kind, msg, msz);
			return 2;
		}
		snprintf(why, wsz, "unexpected frame %u during a copy-out", fr.type);
		return 0;
	}
	if (got == 0)
		snprintf(why, wsz, "%s", s->copy_why);
	return got;
}

int exec_tree_out(struct exec_session *s, const struct exec_copy *cp, const char *dst, int dfd,
		  const char *name, uint64_t room, json_t *list, char *stopped, size_t ssz,
		  uint64_t *bytes)
{
	char why[700] = "", msg[600] = "", rmwhy[300];
	uint8_t buf[4200];
	struct ts_feed *f;
	struct tlv_w w;
	struct tree_seen *t;
	mode_t um;
	int top, r;

	/* Made before anything is asked of the guest: a destination that is
	 * there (a file, a link, a directory, empty or not) is not touched. */
	if (mkdirat(dfd, name, 0700) < 0) {
		snprintf(why, sizeof why, "%s: %s (a directory copy-out makes its destination; "
			 "nothing there is replaced)", dst, strerror(errno));
		exec_copy_out_failed(s, list, cp->guest, dst, why);
		return 1;
	}
	top = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	f = malloc(sizeof *f);
	t = calloc(1, sizeof *t);
	if (t) {
		t->s = s;
		t->skipped = json_array();
		t->files = s->list_files ? json_array() : NULL;
		t->links = s->list_files ? json_array() : NULL;
	}
	if (top < 0 || !f || !t || !t->skipped || (s->list_files && (!t->files || !t->links))) {
		snprintf(why, sizeof why, "%s: %s", dst, top < 0 ? strerror(errno) : "out of memory");
		if (top >= 0)
			close(top);
		free(f);
		if (t) {
			json_decref(t->skipped);
			json_decref(t->files);
			json_decref(t->links);
		}
		free(t);
		unlinkat(dfd, name, AT_REMOVEDIR);
		exec_copy_out_failed(s, list, cp->guest, dst, why);
		return 1;
	}
	/* The modes the guest sends are masked by the user's umask as a
	 * program of theirs would be (no 0777 directory, no 0666 file the
	 * umask forbids), the top's "." record too.  umask can only be read
	 * by setting it: set back at once (one thread). */
	um = umask(0);
	umask(um);
	ts_feed_init(f, top, 0777 & ~(uint32_t)um);
	f->dec.max_bytes = room;
	f->note = on_note;
	f->item = on_item;
	f->ctx = t;
	tlv_init(&w, buf, sizeof buf);
	tlv_put_str(&w, T_PATH, cp->guest);
	tlv_put_u64(&w, T_BYTES, room);
	tlv_put_u32(&w, T_TREE, 1);
	conn_queue(&s->c, F_FILE_GET, STREAM_CTL, buf, w.len);
	r = take_tree(s, f, room, bytes, why, sizeof why, msg, sizeof msg);
	if (r == 1 && ts_feed_end(f, why, sizeof why) < 0)
		r = 3; /* the agent said done, the stream did not */
	ts_feed_free(f);
	free(f);
	close(top);
	if (r == 1) {
		if (t->skipped_cut)
			json_array_append_new(s->warnings, json_sprintf(
				"copy-out %s: the list of entries not copied is cut short", cp->guest));
		if (s->list_files && !t->files)
			json_array_append_new(s->warnings, json_sprintf(
				"copy-out %s: its files are not listed (more than %u files and symlinks, "
				"a name or target not UTF-8, or past the result's bounds): it cannot be "
				"signed", cp->guest,
				EXEC_TREE_FILES_MAX));
		json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:b, s:o, s:o*, s:o*}",
						      "guest", cp->guest, "host", dst, "bytes",
						      (json_int_t)*bytes, "tree", 1, "skipped",
						      t->skipped, "files", t->files, "symlinks",
						      t->links));
		free(t);
		return 0;
	}
	json_decref(t->skipped);
	give_up(t);
	free(t);
	/* Nothing of a copy-out that failed stays: the guest's half-tree is
	 * removed as tree_remove does, links as links. */
	if (tree_remove_at(dfd, name, NULL, rmwhy, sizeof rmwhy) < 0)
		json_array_append_new(s->warnings, json_sprintf("copy-out %s: %s left: %s",
								cp->guest, dst, rmwhy));
	if (r < 0)
		return r;
	if (r == 2 || r == 3) {
		/* the agent ended the stream itself (ERROR, or a FILE_DONE
		 * after a stream cut short): the connection is still good */
		exec_copy_out_failed(s, list, cp->guest, dst, r == 2 ? msg : why);
		return 1;
	}
	/* Nothing can cancel a FILE_GET: the vm is stopped, which ends this
	 * copy-out and the ones after it. */
	if (exec_stop_vm(s) < 0)
		return exec_fail_not_stopped(s, "a copy-out had to be ended");
	snprintf(stopped, ssz, "not copied: the vm was stopped during copy-out (%.180s)", why);
	exec_copy_out_failed(s, list, cp->guest, dst, why);
	return 1;
}
