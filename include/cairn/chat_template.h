/*
 * cairn/chat_template.h — Hugging Face chat templates (a Jinja2 subset interpreter).
 *
 * A chat template is the Jinja2 source found in `chat_template.jinja` or in the
 * `chat_template` field of `tokenizer_config.json`. Cairn renders it the way
 * transformers' apply_chat_template does: jinja2's ImmutableSandboxedEnvironment with
 * trim_blocks=True, lstrip_blocks=True, the loopcontrols extension (break/continue), the
 * `{% generation %}` block, the default Undefined, transformers' `tojson` filter
 * (json.dumps with ensure_ascii=False) and the globals raise_exception and strftime_now.
 * The goal is byte-for-byte identical output; docs/DESIGN.md ("Chat templates") lists the
 * supported subset and its known differences from Python.
 *
 * Usage:
 *     cairn_chat_template_t *t;
 *     char err[256];
 *     if (cairn_chat_template_compile(src, strlen(src), &t, err, sizeof err) == 0) {
 *         char *text; size_t n;
 *         rc = cairn_chat_template_render(t, ctx, &text, &n, err, sizeof err);
 *         ...; cairn_free(text);
 *         cairn_chat_template_destroy(t);
 *     }
 * where ctx is a cJSON object such as
 *     {"messages": [...], "tools": [...], "add_generation_prompt": true,
 *      "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false}
 * Every key of ctx becomes a template variable; the caller supplies the special tokens
 * (transformers passes the tokenizer's special_tokens_map) and any extra kwargs.
 *
 * Thread-safety: a compiled template is immutable; any number of threads may render the
 * same template concurrently. compile/destroy of one template must not race with renders
 * of it.
 */
#ifndef CAIRN_CHAT_TEMPLATE_H
#define CAIRN_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "cairn/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cairn_chat_template cairn_chat_template_t;

/* Default render limits; see cairn_chat_template_set_limits(). */
#define CAIRN_CHAT_TEMPLATE_MAX_OUTPUT ((size_t)64 << 20)  /* bytes of any one string */
#define CAIRN_CHAT_TEMPLATE_MAX_STEPS ((uint64_t)50000000) /* evaluation steps per render */

/*
 * Parses `len` bytes of template source (UTF-8; need not be NUL-terminated) into *out.
 * The source is copied; the caller may free it afterwards.
 *
 * Errors: CAIRN_EINVAL (NULL arguments), CAIRN_ENOMEM, CAIRN_ETEMPLATE (a syntax error),
 * CAIRN_EUNSUPPORTED (a valid Jinja2 statement Cairn does not implement, e.g. `extends`,
 * `include`, `call`), CAIRN_ERANGE (nesting deeper than the parser allows). On error *out
 * is NULL and, when err is non-NULL, err receives a NUL-terminated message of at most
 * errlen bytes that names the construct and its position as "line L, column C".
 * Cost: linear in the source length.
 */
CAIRN_API int cairn_chat_template_compile(const char *src, size_t len, cairn_chat_template_t **out,
                                char *err, size_t errlen);

/*
 * Renders the template with `context` (a cJSON object, or NULL for no variables) and
 * returns the text in *out_text (NUL-terminated, allocated with cairn_malloc; the caller
 * frees it with cairn_free) and its length in bytes in *out_len (may be NULL). The
 * context is only read during the call; the caller keeps ownership.
 *
 * JSON maps to Python as json.loads would, except that a number whose value is integral
 * (and fits in 53 bits) becomes an int, so `1.0` in the context renders as `1`.
 *
 * Errors: CAIRN_EINVAL (NULL template/out_text, or a context that is not an object),
 * CAIRN_ENOMEM, CAIRN_ETEMPLATE (the template raised: raise_exception(msg) puts exactly
 * msg in err; other runtime errors, e.g. an attribute of an undefined value or a type
 * error, put a message with the position), CAIRN_EUNSUPPORTED (the template reached a
 * filter, test, method or global Cairn does not implement; err names it and its
 * position), CAIRN_ERANGE (a render limit was hit). On error *out_text is NULL.
 * Thread-safe (see above). Cost: proportional to the work the template does, bounded by
 * the limits.
 */
CAIRN_API int cairn_chat_template_render(const cairn_chat_template_t *tmpl, const cJSON *context,
                               char **out_text, size_t *out_len, char *err, size_t errlen);

/*
 * Sets the render limits of tmpl: the largest string (including the output) a render may
 * build, in bytes, and the number of evaluation steps (statements, loop iterations, calls)
 * one render may take. 0 keeps the current value. Exceeding either makes the render fail
 * with CAIRN_ERANGE, so a hostile template cannot run away. Not thread-safe with respect
 * to concurrent renders of the same template.
 */
CAIRN_API void cairn_chat_template_set_limits(cairn_chat_template_t *tmpl, size_t max_output,
                                    uint64_t max_steps);

/* Frees a compiled template. NULL is a no-op. */
CAIRN_API void cairn_chat_template_destroy(cairn_chat_template_t *tmpl);

/*
 * Picks a template source out of a tokenizer_config.json `chat_template` value, which is
 * either a string or a list of {"name": ..., "template": ...} objects. For a list, `name`
 * selects the entry (NULL means "default"). *out_src points into `field` (not copied).
 * Errors: CAIRN_EINVAL (NULL arguments), CAIRN_ENOENT (no entry with that name),
 * CAIRN_EFORMAT (field is neither a string nor a list of named templates).
 */
CAIRN_API int cairn_chat_template_pick(const cJSON *field, const char *name, const char **out_src);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_CHAT_TEMPLATE_H */
