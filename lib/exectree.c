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
 * skipped, and each regular file's sha256 of its bytes as they arrive (the
 * holes hashed as the zeros they read as), which isopod-provenance signs
 * each file by after checking the file on the host still holds them. */
struct tree_seen {
	json_t *skipped;
	json_t *files;          /* [{path, sha256, bytes}]; NULL once past the bounds */
	size_t path_bytes;
	crypto_hash_sha256_state h;
	uint64_t size, pos;     /* the file being hashed: its size, hashed so far */
	char path[TS_PATH_MAX + 1];
};

/* Each entry the guest skipped (a device, a hard link): onto the list. */
static void on_note(void *ctx, const char *path, const char *why)
{
	struct tree_seen *t = ctx;

	if (json_array_size(t->skipped) < 100)
		json_array_append_new(t->skipped, json_pack("{s:o, s:o}",
			"path", utf8_json((const uint8_t *)path, strlen(path), 0),
			"why", utf8_json((const uint8_t *)why, strlen(why), 0)));
}

static void hash_zeros(crypto_hash_sha256_state *h, uint64_t n)
{
	uint8_t z[16384];

	memset(z, 0, sizeof z);
	while (n) {
		size_t k = n < sizeof z ? (size_t)n : sizeof z;

		crypto_hash_sha256_update(h, z, k);
		n -= k;
	}
}

/* The list is given up (and no more hashed) past EXEC_TREE_FILES_MAX
 * files or EXEC_TREE_PATHS_MAX bytes of their paths, or at a path that
 * is not UTF-8 (a JSON string could not name it): the result stays small,
 * and isopod-provenance refuses such a tree rather than sign part of it. */
static void give_up(struct tree_seen *t)
{
	json_decref(t->files);
	t->files = NULL;
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
		if (it->kind != 'f')
			return;
		l = strlen(it->path);
		if (json_array_size(t->files) >= EXEC_TREE_FILES_MAX ||
		    l > EXEC_TREE_PATHS_MAX - t->path_bytes || !utf8_valid(it->path, l)) {
			give_up(t);
			return;
		}
		t->path_bytes += l;
		memcpy(t->path, it->path, l + 1);
		t->size = it->size;
		t->pos = 0;
		crypto_hash_sha256_init(&t->h);
		return;
	case TS_DATA:
		hash_zeros(&t->h, it->off - t->pos);
		crypto_hash_sha256_update(&t->h, it->data, it->len);
		t->pos = it->off + it->len;
		return;
	case TS_FILE_END:
		hash_zeros(&t->h, t->size - t->pos);
		crypto_hash_sha256_final(&t->h, md);
		sodium_bin2hex(sha, sizeof sha, md, sizeof md);
		if (json_array_append_new(t->files, json_pack("{s:s, s:s, s:I}", "path", t->path,
							      "sha256", sha, "bytes",
							      (json_int_t)t->size)) < 0)
			give_up(t);
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
		t->skipped = json_array();
		t->files = json_array();
	}
	if (top < 0 || !f || !t || !t->skipped || !t->files) {
		snprintf(why, sizeof why, "%s: %s", dst, top < 0 ? strerror(errno) : "out of memory");
		if (top >= 0)
			close(top);
		free(f);
		if (t) {
			json_decref(t->skipped);
			json_decref(t->files);
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
		json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:b, s:o, s:o*}", "guest",
						      cp->guest, "host", dst, "bytes",
						      (json_int_t)*bytes, "tree", 1, "skipped",
						      t->skipped, "files", t->files));
		free(t);
		return 0;
	}
	json_decref(t->skipped);
	json_decref(t->files);
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
