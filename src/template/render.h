/*
 * render.h — the interpreter entry point shared by chat_template.c and render.c.
 */
#ifndef CAIRN_TEMPLATE_RENDER_H
#define CAIRN_TEMPLATE_RENDER_H

#include "template/template_impl.h"

/*
 * Renders t with the variables of `context` (a cJSON object or NULL) appending to *out.
 * Returns 0 or a negative CAIRN_E* code with a message in err (see chat_template.h).
 */
int trender(const cairn_chat_template_t *t, const cJSON *context, tbuf *out, char *err,
            size_t errlen);

#endif /* CAIRN_TEMPLATE_RENDER_H */
