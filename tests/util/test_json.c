/*
 * test_json.c — util/json.h: out of memory inside cJSON is CAIRN_ENOMEM, malformed text is
 * CAIRN_EFORMAT, for every allocation of a parse failing in turn (the hooks are the ones
 * cairn_init() installs, as in every binary of the project).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "util/json.h"

static const char doc[] =
    "{\"model_type\": \"llama\", \"list\": [1, 2.5, \"three\", null, true], "
    "\"nested\": {\"a\": {\"b\": [\"deep\", {\"c\": 1}]}}, \"text\": \"caf\\u00e9\"}";

static void test_parse(void **state)
{
    cJSON *j = NULL;
    size_t at = 99;
    assert_int_equal(cairn_json_parse(doc, strlen(doc), NULL, &j, &at), CAIRN_OK);
    assert_string_equal(cJSON_GetObjectItem(j, "model_type")->valuestring, "llama");
    cJSON_Delete(j);
    assert_int_equal(cairn_json_parse("{\"a\": ", 6, NULL, &j, &at), CAIRN_EFORMAT);
    assert_null(j);
    assert_int_equal(cairn_json_parse("[1, 2] tail", 11, NULL, &j, NULL), CAIRN_OK);
    cJSON_Delete(j);
    const char *end = NULL;
    assert_int_equal(cairn_json_parse("[1, 2] tail", 11, &end, &j, NULL), CAIRN_OK);
    assert_string_equal(end, " tail");
    cJSON_Delete(j);
    assert_int_equal(cairn_json_parse(NULL, 0, NULL, &j, NULL), CAIRN_EFORMAT);
}

/* Every allocation of a valid parse fails in turn: always ENOMEM, never EFORMAT. */
static void test_alloc_sweep(void **state)
{
    cJSON *j = NULL;
    unsigned long before = cairn_alloc_count();
    assert_int_equal(cairn_json_parse(doc, strlen(doc), NULL, &j, NULL), CAIRN_OK);
    long n = (long)(cairn_alloc_count() - before);
    cJSON_Delete(j);
    assert_true(n > 10);
    for (long k = 0; k < n; k++) {
        cairn_alloc_fail_after(k, false);
        int rc = cairn_json_parse(doc, strlen(doc), NULL, &j, NULL);
        cairn_alloc_fail_after(-1, false);
        if (rc != CAIRN_ENOMEM)
            fail_msg("allocation %ld of %ld failed: got %d", k, n, rc);
        assert_null(j);
        /* The flag does not stick: the next parse is clean. */
        assert_int_equal(cairn_json_parse("[]", 2, NULL, &j, NULL), CAIRN_OK);
        cJSON_Delete(j);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_alloc_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
