/* mul_mat.c: the C API on the emulated NPU.
 *
 * Makes int8, int4 and fp16 weights from seeded values, runs rknpu_mul_mat for m = 1
 * and m = 5 against each, compares with a reference computed here in double (a
 * relative-error bound: the library quantises x to int8 per row for integer weights and
 * rounds it to fp16 for fp16 weights), asks rknpu_mul_mat_supported before making each,
 * runs the same products asynchronously (rknpu_mul_mat_submit, rknpu_job_wait) and
 * as one batch job (rknpu_batch_submit) and checks they equal the synchronous ones,
 * writes fp16 rows straight into the NPU's input (rknpu_mul_mat_write),
 * checks error paths and handle misuse, and prints OK last.
 *
 *   cargo build --release -p rknpu-capi
 *   cc -O2 -Icapi/include capi/examples/mul_mat.c -Ltarget/release -lrknpu -lm -o mul_mat
 *   LD_LIBRARY_PATH=target/release ./mul_mat
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rknpu.h"

enum { N = 48, K = 128, MAX_M = 5 };

/* Bounds on the largest error relative to the largest result. int8 and int4: x
 * quantised per row to a step of 1/127 of its largest value, K = 128 products:
 * 0.26 % to 0.31 % measured; fp16: x rounded to 11 bits, 0.015 % to 0.021 %. Each bound
 * leaves a margin of more than six times. */
#define INT_BOUND 0.02
#define F16_BOUND 0.005

static uint64_t state = 0x2545F4914F6CDD1DULL;

/* A seeded value in [0, 2^32). */
static uint32_t next(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (uint32_t)(state >> 32);
}

/* A seeded value in [-1, 1). */
static float unit(void) { return (float)((double)next() / 2147483648.0 - 1.0); }

/* An fp16 value with magnitude in [1/8, 2): its bits, and the float in *value. */
static uint16_t half_bits(float *value) {
    uint32_t sign = next() & 1, exponent = 12 + next() % 4, mantissa = next() % 1024;
    *value = (float)ldexp(1.0 + mantissa / 1024.0, (int)exponent - 15) * (sign ? -1.0f : 1.0f);
    return (uint16_t)(sign << 15 | exponent << 10 | mantissa);
}

static int failures = 0;

/* Fails the run with a message. */
static void fail(const char *what) {
    fprintf(stderr, "FAIL: %s (%s)\n", what, rknpu_last_error());
    failures++;
}

/* Runs w against m seeded rows and compares with the reference weights wref (n rows of
 * k doubles, dequantised). */
static void check(const char *name, rknpu_weights *w, const double *wref, uint32_t m, double bound) {
    static float x[MAX_M * K], y[MAX_M * N];
    for (uint32_t i = 0; i < m * K; i++) x[i] = unit();
    int rc = rknpu_mul_mat(w, x, m, y);
    if (rc != 0) {
        fail(name);
        return;
    }
    double largest = 0, worst = 0;
    for (uint32_t i = 0; i < m; i++) {
        for (uint32_t j = 0; j < N; j++) {
            double r = 0;
            for (uint32_t p = 0; p < K; p++) r += (double)x[i * K + p] * wref[j * K + p];
            if (fabs(r) > largest) largest = fabs(r);
            if (fabs(y[i * N + j] - r) > worst) worst = fabs(y[i * N + j] - r);
        }
    }
    double rel = worst / largest;
    printf("%-5s m=%u: relative error %.5f (bound %.3f)\n", name, m, rel, bound);
    if (!(rel < bound)) fail(name);
}

/* Runs w against m rows both synchronously and as a job; the results must be equal bit
 * for bit, and the job must leave y alone until it is waited for. */
static void check_job(const char *name, rknpu_weights *w, uint32_t m) {
    static float x[MAX_M * K], y[MAX_M * N], yj[MAX_M * N];
    for (uint32_t i = 0; i < m * K; i++) x[i] = unit();
    for (uint32_t i = 0; i < m * N; i++) yj[i] = -1.0f;
    rknpu_job *job = NULL;
    if (rknpu_mul_mat_submit(w, 0 /* F32 */, x, K * sizeof(float), m, yj, N * sizeof(float), &job) != 0) {
        fail(name);
        return;
    }
    /* x may be reused at once: the job copied it. */
    if (rknpu_mul_mat(w, x, m, y) != 0) fail(name);
    memset(x, 0, sizeof x);
    int rc = rknpu_job_wait(job);
    if (rc != 0) fail(name);
    if (rknpu_job_wait(job) != RKNPU_ERR_ARG) fail("second wait");
    if (rknpu_job_free(job) != 0) fail("rknpu_job_free");
    if (rc == 0 && memcmp(y, yj, m * N * sizeof(float)) != 0) fail("job differs from rknpu_mul_mat");
    printf("%-5s m=%u: job equals the synchronous product\n", name, m);
}

/* rknpu_mul_mat_write's callback: copies one row of K fp16 values from user. */
static int write_rows(void *user, void *rows, size_t stride, uint32_t m, uint32_t k) {
    if (m != 1 || k != K || stride < k * sizeof(uint16_t)) return 1;
    memcpy(rows, user, k * sizeof(uint16_t));
    return 0;
}

int main(void) {
    rknpu_device *dev = NULL;
    if (rknpu_open("emu", &dev) != 0) {
        fail("rknpu_open(\"emu\")");
        return 1;
    }

    static int8_t w8[N * K];
    static uint8_t w4[N * K / 2];
    static uint16_t wh[N * K];
    static float scale[N];
    static double ref8[N * K], ref4[N * K], refh[N * K];
    for (int j = 0; j < N; j++) scale[j] = 0.01f + 0.001f * (float)j;
    for (int i = 0; i < N * K; i++) {
        int v8 = (int)(next() % 255) - 127;
        int v4 = (int)(next() % 16) - 8;
        float h;
        w8[i] = (int8_t)v8;
        ref8[i] = v8 * (double)scale[i / K];
        if (i % 2 == 0) w4[i / 2] = (uint8_t)(v4 & 0xf);
        else w4[i / 2] |= (uint8_t)((v4 & 0xf) << 4);
        ref4[i] = v4 * (double)scale[i / K];
        wh[i] = half_bits(&h);
        refh[i] = h;
    }

    /* The limits query answers before anything is made, and agrees with what follows. */
    if (rknpu_mul_mat_supported(dev, RKNPU_WEIGHTS_I8, 0, N, K, MAX_M) != 0) fail("supported i8");
    if (rknpu_mul_mat_supported(dev, RKNPU_WEIGHTS_I4, 0, N, K, MAX_M) != 0) fail("supported i4");
    if (rknpu_mul_mat_supported(dev, 1 /* F16 */, 0, N, K, MAX_M) != 0) fail("supported f16");
    if (rknpu_mul_mat_supported(dev, RKNPU_WEIGHTS_I4, 0, N, K - 1, 1) != RKNPU_ERR_ARG) fail("odd k supported");
    if (rknpu_mul_mat_supported(dev, 1, 0, 1, 1u << 28, 1) != RKNPU_ERR_UNSUPPORTED) fail("huge k supported");

    rknpu_weights *a = NULL, *b = NULL, *c = NULL;
    if (rknpu_weights_i8(dev, w8, scale, N, K, &a) != 0) fail("rknpu_weights_i8");
    if (rknpu_weights_i4(dev, w4, scale, N, K, &b) != 0) fail("rknpu_weights_i4");
    if (rknpu_weights_f16(dev, wh, N, K, &c) != 0) fail("rknpu_weights_f16");
    if (failures) return 1;
    for (uint32_t m = 1; m <= MAX_M; m += MAX_M - 1) {
        check("int8", a, ref8, m, INT_BOUND);
        check("int4", b, ref4, m, INT_BOUND);
        check("f16", c, refh, m, F16_BOUND);
        check_job("int8", a, m);
        check_job("f16", c, m);
    }

    /* Two fp16 weights sharing their input, as one asynchronous NPU job. */
    {
        rknpu_weights *pair[2] = {c, c};
        rknpu_batch *batch = NULL;
        static float x[MAX_M * K], y0[MAX_M * N], y1[MAX_M * N], ys[MAX_M * N];
        for (uint32_t i = 0; i < MAX_M * K; i++) x[i] = unit();
        float *outs[2] = {y0, y1};
        size_t strides[2] = {N * sizeof(float), N * sizeof(float)};
        rknpu_job *job = NULL;
        if (rknpu_batch_new(pair, 2, MAX_M, &batch) != 0) fail("rknpu_batch_new");
        else if (rknpu_batch_submit(batch, 0, x, K * sizeof(float), outs, strides, &job) != 0) fail("rknpu_batch_submit");
        else if (rknpu_job_wait(job) != 0) fail("batch job");
        else if (rknpu_mul_mat(c, x, MAX_M, ys) != 0) fail("batch reference");
        else if (memcmp(ys, y0, sizeof ys) != 0 || memcmp(ys, y1, sizeof ys) != 0) fail("batch job differs");
        else printf("batch job of 2 equals the single products\n");
        rknpu_job_free(job);
        rknpu_batch_free(batch);
    }

    /* fp16 rows written straight into the NPU's input buffer by a callback: the same
     * result as rknpu_mul_mat_ex of those rows. */
    {
        static uint16_t xh[K];
        static float yw[N], ye[N];
        float v;
        for (uint32_t i = 0; i < K; i++) xh[i] = half_bits(&v);
        if (rknpu_mul_mat_ex(c, 1 /* F16 */, xh, K * sizeof(uint16_t), 1, ye, N * sizeof(float)) != 0) fail("f16 rows");
        else if (rknpu_mul_mat_write(c, 1, 1, write_rows, xh, yw, N * sizeof(float)) != 0) fail("rknpu_mul_mat_write");
        else if (memcmp(yw, ye, sizeof yw) != 0) fail("written rows differ");
        else printf("rows written in place equal rknpu_mul_mat_ex\n");
        if (rknpu_mul_mat_write(a, 1, 1, write_rows, xh, yw, N * sizeof(float)) != RKNPU_ERR_UNSUPPORTED) fail("written rows on int8 weights");
    }

    /* Error paths: each returns a negative code and leaves a message. */
    rknpu_weights *bad = NULL;
    float y[N];
    int rc = rknpu_weights_i4(dev, w4, scale, N, K - 1, &bad);
    printf("odd k for int4: %d, \"%s\"\n", rc, rknpu_last_error());
    if (rc != RKNPU_ERR_ARG || bad != NULL || strlen(rknpu_last_error()) == 0) fail("odd k");
    rc = rknpu_weights_i8(dev, NULL, scale, N, K, &bad);
    if (rc != RKNPU_ERR_ARG || strlen(rknpu_last_error()) == 0) fail("NULL weights");
    rc = rknpu_mul_mat(a, NULL, 1, y);
    if (rc != RKNPU_ERR_ARG || strlen(rknpu_last_error()) == 0) fail("NULL x");
    rc = rknpu_mul_mat(a, y, 0, y);
    if (rc != RKNPU_ERR_ARG || strlen(rknpu_last_error()) == 0) fail("m = 0");
    rc = rknpu_open("emu", NULL);
    if (rc != RKNPU_ERR_ARG || strlen(rknpu_last_error()) == 0) fail("NULL out");

    /* Handle misuse is an error code, not undefined behaviour. */
    if (rknpu_weights_free(a) != 0) fail("rknpu_weights_free");
    rc = rknpu_weights_free(a);
    printf("double free: %d, \"%s\"\n", rc, rknpu_last_error());
    if (rc != RKNPU_ERR_ARG) fail("double free");
    if (rknpu_mul_mat(a, y, 1, y) != RKNPU_ERR_ARG) fail("use after free");
    if (rknpu_close((rknpu_device *)b) != RKNPU_ERR_ARG) fail("wrong kind");
    if (rknpu_weights_free(b) != 0 || rknpu_weights_free(c) != 0) fail("rknpu_weights_free");
    if (rknpu_close(dev) != 0) fail("rknpu_close");
    if (failures) return 1;
    printf("OK\n");
    return 0;
}
