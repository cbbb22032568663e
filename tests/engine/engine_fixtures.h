/*
 * engine_fixtures.h — helpers shared by the engine tests: fixture paths and the prompt
 * token ids of the reference cases (models/<name>/reference.json, see the fixtures README).
 */
#ifndef CAIRN_TEST_ENGINE_FIXTURES_H
#define CAIRN_TEST_ENGINE_FIXTURES_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn/checkpoint.h"

/* <fixtures>/models/<model>, in a static buffer; <fixtures> is the environment's
 * CAIRN_FIXTURES when set (tests run on another machine, e.g. the GPU device), else the
 * build's CAIRN_FIXTURES_DIR. */
static inline const char *fixture_model_dir(const char *model)
{
    static char buf[1024];
    const char *root = getenv("CAIRN_FIXTURES");
    snprintf(buf, sizeof(buf), "%s/models/%s", root && root[0] ? root : CAIRN_FIXTURES_DIR, model);
    return buf;
}

/* Opens a fixture checkpoint; a missing fixture aborts the test (it is a failure). */
static inline cairn_checkpoint_t *fixture_open(const char *model)
{
    cairn_checkpoint_t *ck = NULL;
    char err[512] = "";
    if (cairn_checkpoint_open(fixture_model_dir(model), &ck, err, sizeof(err)) != 0) {
        fprintf(stderr, "fixture %s: %s\n", model, err);
        abort();
    }
    return ck;
}

/* The prompt_ids of case `name` in <model>/reference.json, malloc'd; *n their count. */
static inline int32_t *fixture_prompt(const char *model, const char *name, int *n)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/reference.json", fixture_model_dir(model));
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "missing fixture %s\n", path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size)
        abort();
    text[size] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    free(text);
    int32_t *ids = NULL;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        if (strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name) != 0)
            continue;
        const cJSON *arr = cJSON_GetObjectItem(c, "prompt_ids"), *it;
        *n = cJSON_GetArraySize(arr);
        ids = malloc((size_t)*n * sizeof(int32_t));
        int i = 0;
        cJSON_ArrayForEach(it, arr) ids[i++] = (int32_t)it->valueint;
    }
    cJSON_Delete(root);
    if (!ids) {
        fprintf(stderr, "fixture %s has no case %s\n", model, name);
        abort();
    }
    return ids;
}

#endif
