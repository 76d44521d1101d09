/* One decode token's attention for a batch of rows over a slot KV cache (fp32), rows split over `threads`.
 *
 * Compiled at run time by engine_adapters.native.decode.c_kernels with HEAD_DIM and GROUP (query heads per KV head) fixed,
 * so the compiler unrolls and vectorises the head-dimension loops (-fassociative-math lets it vectorise the dot
 * products' sums; exp is fast_exp.h's). Rows are split over threads (work_pool.h): one core streams each row's keys and
 * values at about half the memory bandwidth (too few misses in flight), so two threads nearly double it. Every row
 * reads only its own filled positions, so no -inf masking is needed.
 *
 * Row r of the batch attends over the `lens[r]` cached positions of slot `slots[r]` plus its own new key/value
 * (k_new/v_new, not yet in the cache), with the softmax split the same way as
 * engine_adapters.native.decode.decode_graph._attend.
 * Layouts (contiguous): q [S, KVH * GROUP, HEAD_DIM] (rotated, unscaled); k_new, v_new [S, KVH, HEAD_DIM];
 * key_cache, value_cache [num_slots, KVH, max_len, HEAD_DIM]; out [S, KVH * GROUP, HEAD_DIM].
 * Returns 0, or r + 1 for the first row r whose slot is outside [0, num_slots) or whose length is outside
 * [0, max_len) (then nothing is computed), or -1 when scratch memory cannot be allocated.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fast_exp.h"
#include "work_pool.h"


/* Requests the cache lines of one position's key or value (HEAD_DIM floats), for a later (row, head). */
static inline void prefetch_position(const float *p) {
    for (int d = 0; d < HEAD_DIM; d += 16) __builtin_prefetch(p + d, 0, 3);
}

static inline float dot(const float *a, const float *b) {
    float acc = 0.0f;
    for (int d = 0; d < HEAD_DIM; d++) acc += a[d] * b[d];
    return acc;
}

/* Scores of the GROUP query heads against n cached keys and the own key, turned into unnormalised softmax
 * weights in place (scores[g * (n + 1) + l], l = n is the own key); returns each head's sum in `total`. */
static void weights(const float *q, const float *keys, const float *own, int64_t n, float scale, float *scores,
                    float *total, const float *next, int64_t next_n) {
    for (int64_t l = 0; l < n; l++) {
        const float *k = keys + l * HEAD_DIM;
        if (l < next_n) prefetch_position(next + l * HEAD_DIM);
        for (int g = 0; g < GROUP; g++) scores[g * (n + 1) + l] = dot(q + g * HEAD_DIM, k) * scale;
    }
    for (int g = 0; g < GROUP; g++) {
        float *s = scores + g * (n + 1);
        s[n] = dot(q + g * HEAD_DIM, own) * scale;
        float top = s[0];
        for (int64_t l = 1; l <= n; l++) top = s[l] > top ? s[l] : top;
        float sum = 0.0f;
        for (int64_t l = 0; l <= n; l++) {
            s[l] = fast_exp(s[l] - top);
            sum += s[l];
        }
        total[g] = sum;
    }
}

/* out[g] = (sum_l w[g][l] * values[l] + w[g][n] * own) / total[g]. */
static void mix(const float *scores, const float *values, const float *own, int64_t n, const float *total,
                float *out, const float *next, int64_t next_n) {
    float acc[GROUP][HEAD_DIM] = {{0.0f}};
    for (int64_t l = 0; l < n; l++) {
        const float *v = values + l * HEAD_DIM;
        if (l < next_n) prefetch_position(next + l * HEAD_DIM);
        for (int g = 0; g < GROUP; g++) {
            const float w = scores[g * (n + 1) + l];
            for (int d = 0; d < HEAD_DIM; d++) acc[g][d] += w * v[d];
        }
    }
    for (int g = 0; g < GROUP; g++) {
        const float w = scores[g * (n + 1) + n], inv = 1.0f / total[g];
        for (int d = 0; d < HEAD_DIM; d++) out[g * HEAD_DIM + d] = (acc[g][d] + w * own[d]) * inv;
    }
}

/* Row r's heads; rows are split between threads, so each row's (slot, head) blocks are fetched one ahead within
 * the row and the next row's first block while its last is used. */
static void attend_row(const float *q, const float *k_new, const float *v_new, const float *key_cache,
                       const float *value_cache, const int64_t *slots, const int64_t *lens, int64_t rows, int64_t r,
                       int64_t kv_heads, int64_t max_len, float scale, float *out, float *scratch) {
    float total[GROUP];
    const int64_t n = lens[r];
    for (int64_t h = 0; h < kv_heads; h++) {
        const int64_t base = ((slots[r] * kv_heads + h) * max_len) * HEAD_DIM;
        const int64_t head = (r * kv_heads + h) * GROUP * HEAD_DIM, own = (r * kv_heads + h) * HEAD_DIM;
        const int last = h + 1 == kv_heads && r + 1 == rows;
        const int64_t nr = h + 1 < kv_heads ? r : r + 1, nh = h + 1 < kv_heads ? h + 1 : 0;
        const int64_t next = last ? base : ((slots[nr] * kv_heads + nh) * max_len) * HEAD_DIM;
        const int64_t next_n = last ? 0 : lens[nr];
        weights(q + head, key_cache + base, k_new + own, n, scale, scratch, total, key_cache + next, next_n);
        mix(scratch, value_cache + base, v_new + own, n, total, out + head, value_cache + next, next_n);
    }
}

typedef struct {
    const float *q, *k_new, *v_new, *key_cache, *value_cache;
    const int64_t *slots, *lens;
    int64_t rows, kv_heads, max_len;
    float scale;
    float *out;
    atomic_int failed;
} AttentionJob;

#define ROWS_PER_ITEM 4 /* consecutive rows per work item: the next row's prefetch stays on this thread */

static void attention_item(void *ctx, int64_t item) {
    AttentionJob *j = ctx;
    float *scratch = pool_scratch(GROUP * (j->max_len + 1));
    if (!scratch) {
        atomic_store(&j->failed, 1);
        return;
    }
    const int64_t end = (item + 1) * ROWS_PER_ITEM < j->rows ? (item + 1) * ROWS_PER_ITEM : j->rows;
    for (int64_t r = item * ROWS_PER_ITEM; r < end; r++)
        attend_row(j->q, j->k_new, j->v_new, j->key_cache, j->value_cache, j->slots, j->lens, j->rows, r,
                   j->kv_heads, j->max_len, j->scale, j->out, scratch);
}

int64_t decode_attention(const float *q, const float *k_new, const float *v_new, const float *key_cache,
                         const float *value_cache, const int64_t *slots, const int64_t *lens, int64_t rows,
                         int64_t num_slots, int64_t kv_heads, int64_t max_len, float scale, float *out,
                         int64_t threads) {
    for (int64_t r = 0; r < rows; r++)
        if (slots[r] < 0 || slots[r] >= num_slots || lens[r] < 0 || lens[r] >= max_len) return r + 1;
    AttentionJob job = {q, k_new, v_new, key_cache, value_cache, slots, lens, rows, kv_heads, max_len, scale, out, 0};
    pool_parallel_for(attention_item, &job, (rows + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM, threads);
    return atomic_load(&job.failed) ? -1 : 0;
}
