/* The routed experts of one MoE layer for a decode batch (fp32): out = h + sum_k w[s,k] * FFN_{ids[s,k]}(x[s]),
 * FFN_e(x) = (silu(x @ G_e) * (x @ U_e)) @ D_e, with experts split over `threads` threads (work_pool.h).
 *
 * Compiled at run time by engine_adapters.native.decode.c_kernels with HIDDEN and INTER (the expert's intermediate size)
 * fixed, so the matmul loops below unroll into register tiles (ROWS rows x TILE columns of accumulators) that the
 * compiler vectorises (silu's exp is fast_exp.h's).
 * Layouts (contiguous): x, h, out [S, HIDDEN]; ids [S, K] int64 in [0, E); weights [S, K] fp32;
 * gate_up [E, HIDDEN, 2 * INTER] (gate columns first); down [E, INTER, HIDDEN].
 * Each row's K contributions are added in ascending expert order (as
 * engine_adapters.native.decode.decode_step.routed_experts does).
 * Returns 0, r + 1 for the first row r with an expert id outside [0, E) (nothing computed), or -1 when scratch
 * memory cannot be allocated.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fast_exp.h"
#include "work_pool.h"

#define ROWS 4
#define TILE 64

/* c[ROWS, n] = a[ROWS, k] @ b[k, n] (row-major, leading dimensions k and n); n is a multiple of TILE or the
 * remainder is done column by column. */
static void matmul_rows(const float *a, const float *b, float *c, int k, int n) {
    int j0 = 0;
    for (; j0 + TILE <= n; j0 += TILE) {
        float acc[ROWS][TILE] = {{0.0f}};
        for (int p = 0; p < k; p++) {
            const float *bp = b + (int64_t)p * n + j0;
            for (int r = 0; r < ROWS; r++) {
                const float ar = a[r * k + p];
                for (int j = 0; j < TILE; j++) acc[r][j] += ar * bp[j];
            }
        }
        for (int r = 0; r < ROWS; r++) memcpy(c + (int64_t)r * n + j0, acc[r], sizeof(acc[r]));
    }
    for (int j = j0; j < n; j++)
        for (int r = 0; r < ROWS; r++) {
            float acc = 0.0f;
            for (int p = 0; p < k; p++) acc += a[r * k + p] * b[(int64_t)p * n + j];
            c[(int64_t)r * n + j] = acc;
        }
}

/* One expert over its `count` pairs (pair p is row pairs[p] / K): y[pair] = FFN(x[row]) for each. */
static void expert(const float *x, const int64_t *pairs, int64_t count, int64_t top_k, const float *gate_up,
                   const float *down, float *y, float *scratch) {
    float *in = scratch, *mid = in + ROWS * HIDDEN, *act = mid + ROWS * 2 * INTER, *res = act + ROWS * INTER;
    for (int64_t p0 = 0; p0 < count; p0 += ROWS) {
        const int64_t m = count - p0 < ROWS ? count - p0 : ROWS;
        memset(in, 0, sizeof(float) * ROWS * HIDDEN);
        for (int64_t r = 0; r < m; r++) memcpy(in + r * HIDDEN, x + pairs[p0 + r] / top_k * HIDDEN, sizeof(float) * HIDDEN);
        matmul_rows(in, gate_up, mid, HIDDEN, 2 * INTER);
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < INTER; j++) {
                const float g = mid[r * 2 * INTER + j];
                act[r * INTER + j] = g / (1.0f + fast_exp(-g)) * mid[r * 2 * INTER + INTER + j];
            }
        matmul_rows(act, down, res, INTER, HIDDEN);
        for (int64_t r = 0; r < m; r++) memcpy(y + pairs[p0 + r] * HIDDEN, res + r * HIDDEN, sizeof(float) * HIDDEN);
    }
}

typedef struct {
    const float *x, *gate_up, *down;
    const int64_t *start, *order;
    int64_t top_k;
    float *y;
    atomic_int failed;
} ExpertJob;

static void expert_item(void *ctx, int64_t e) {
    ExpertJob *j = ctx;
    const int64_t count = j->start[e + 1] - j->start[e];
    if (count == 0) return;
    float *scratch = pool_scratch(ROWS * (2 * HIDDEN + 3 * INTER));
    if (!scratch) {
        atomic_store(&j->failed, 1);
        return;
    }
    expert(j->x, j->order + j->start[e], count, j->top_k, j->gate_up + e * (int64_t)HIDDEN * 2 * INTER,
           j->down + e * (int64_t)INTER * HIDDEN, j->y, scratch);
}

/* Pairs (row, k) sorted by expert, stably: order[start[e] .. start[e + 1]) are expert e's. 0, or -1 without memory. */
static int sort_pairs(const int64_t *ids, int64_t pairs_total, int64_t num_experts, int64_t *start, int64_t *order) {
    int64_t *fill = malloc(sizeof(int64_t) * (num_experts + 1));
    if (!fill) return -1;
    for (int64_t p = 0; p < pairs_total; p++) start[ids[p] + 1]++;
    for (int64_t e = 0; e < num_experts; e++) start[e + 1] += start[e];
    memcpy(fill, start, sizeof(int64_t) * (num_experts + 1));
    for (int64_t p = 0; p < pairs_total; p++) order[fill[ids[p]]++] = p;
    free(fill);
    return 0;
}

/* out[s] = h[s] + sum of its pairs' weighted outputs, in ascending expert order. */
static void combine(const float *h, const int64_t *ids, const float *weights, const float *y, int64_t rows,
                    int64_t top_k, int64_t num_experts, float *out) {
    for (int64_t s = 0; s < rows; s++) {
        float *o = out + s * HIDDEN;
        memcpy(o, h + s * HIDDEN, sizeof(float) * HIDDEN);
        for (int64_t e = 0; e < num_experts; e++) /* K is small */
            for (int64_t k = 0; k < top_k; k++)
                if (ids[s * top_k + k] == e) {
                    const float w = weights[s * top_k + k], *ys = y + (s * top_k + k) * HIDDEN;
                    for (int j = 0; j < HIDDEN; j++) o[j] += w * ys[j];
                }
    }
}

int64_t moe_experts(const float *x, const float *h, const int64_t *ids, const float *weights, const float *gate_up,
                    const float *down, int64_t rows, int64_t top_k, int64_t num_experts, float *out,
                    int64_t threads) {
    const int64_t pairs_total = rows * top_k;
    for (int64_t p = 0; p < pairs_total; p++)
        if (ids[p] < 0 || ids[p] >= num_experts) return p / top_k + 1;
    int64_t *start = calloc(num_experts + 1, sizeof(int64_t)), *order = malloc(sizeof(int64_t) * (pairs_total + 1));
    float *y = malloc(sizeof(float) * (pairs_total + 1) * HIDDEN);
    int failed = !start || !order || !y || sort_pairs(ids, pairs_total, num_experts, start, order);
    if (!failed) {
        ExpertJob job = {x, gate_up, down, start, order, top_k, y, 0};
        pool_parallel_for(expert_item, &job, num_experts, threads);
        failed = atomic_load(&job.failed);
    }
    if (!failed) combine(h, ids, weights, y, rows, top_k, num_experts, out);
    free(start);
    free(order);
    free(y);
    return failed ? -1 : 0;
}
