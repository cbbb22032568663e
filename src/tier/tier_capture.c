/*
 * tier_capture.c — the per-turn capture walk: persist a chain's blocks from the front,
 * within a budget of new objects and a deadline.
 *
 * Model: the walk asks the store, block by block from block 0, whether it holds (or has
 * accepted) the object; present ones cost that metadata probe and spend nothing, new ones
 * are put (the store copies them), each waiting for room until the deadline. It stops at
 * the first object it could not capture: restore stops at the first hole, so capturing
 * past one buys nothing. The reach per turn is therefore chosen (budget, deadline), not an
 * accident of disk speed.
 * Invariant: res->reached leading objects are held or accepted when the walk returns, and
 * res->reached == res->already + res->enqueued.
 * Thread-safety: reentrant; the store's ops are thread-safe.
 */
#include <string.h>
#include <time.h>

#include "cairn/tier.h"
#include "util/util.h"

int cairn_tier_capture_chain(cairn_tier_store_t *s, size_t n, cairn_tier_object_fn fn, void *user,
                             const cairn_tier_capture_budget_t *budget, cairn_tier_capture_result_t *res)
{
    if (!s || !fn || !res)
        return CAIRN_EINVAL;
    memset(res, 0, sizeof *res);
    bool hb = budget && budget->blocks_per_turn, hm = budget && budget->budget_ms;
    uint64_t max_blocks = (uint64_t)cairn_knob_int("CAIRN_COLD_CAPTURE_BLOCKS_PER_TURN", hb,
                                                   hb ? budget->blocks_per_turn : 0,
                                                   CAIRN_TIER_DEFAULT_CAPTURE_BLOCKS, 0, 1 << 24);
    double budget_ms = (double)cairn_knob_int("CAIRN_COLD_CAPTURE_BUDGET_MS", hm, hm ? budget->budget_ms : 0,
                                              CAIRN_TIER_DEFAULT_CAPTURE_BUDGET_MS, 0, 3600 * 1000);
    double t0 = cairn_now_ms(), deadline = t0 + budget_ms;
    res->stop = CAIRN_TIER_STOP_END;
    for (size_t i = 0; i < n; i++) {
        cairn_tier_object_t obj;
        memset(&obj, 0, sizeof obj);
        if (fn(user, i, &obj) < 0) {
            res->stop = CAIRN_TIER_STOP_CALLBACK;
            break;
        }
        /* An object already held or accepted costs a metadata probe and spends no budget. */
        if (cairn_tier_store_contains(s, &obj.key)) {
            res->already++;
            res->reached++;
            continue;
        }
        if (res->enqueued >= max_blocks) {
            res->stop = CAIRN_TIER_STOP_BUDGET;
            break;
        }
        double now = cairn_now_ms();
        if (now >= deadline) {
            res->stop = CAIRN_TIER_STOP_DEADLINE;
            break;
        }
        bool queued = false;
        int rc = cairn_tier_store_put(s, &obj, (uint32_t)(deadline - now) + 1, &queued);
        if (rc) {
            res->stop = rc == CAIRN_EEXHAUSTED && cairn_now_ms() >= deadline ? CAIRN_TIER_STOP_DEADLINE
                                                                        : CAIRN_TIER_STOP_REFUSED;
            break;
        }
        if (queued)
            res->enqueued++;
        else
            res->already++;
        res->reached++;
    }
    res->elapsed_ms = cairn_now_ms() - t0;
    if (res->stop == CAIRN_TIER_STOP_DEADLINE)
        cairn_log(CAIRN_LOG_WARN, "cold tier: capture stopped at its %.0f ms deadline after %zu new blocks",
                  budget_ms, res->enqueued);
    return CAIRN_OK;
}
