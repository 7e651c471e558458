/* CPU kernels that misbehave while they run, for the tests of kernel hosts
 * (kernels/bundle/kernel_host.hpp): each would take down a process that
 * called it. Only kernel host processes run them (except hostile_ok). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/kernel_abi.h"

/* out[i] = x[i] + 1 (f64): the kernel that shows a host still serves. */
int hostile_ok(const cohort_kernel_call* call) {
  const double* x = (const double*)call->inputs[0].data;
  double* out = (double*)call->output;
  for (uint64_t i = 0; i < call->output_length; ++i)
    out[i] = x[i] + 1;
  return 0;
}

/* A store to the first page (address 8: a sanitizer's null check would
 * catch a store to 0 and exit instead). */
int hostile_null(const cohort_kernel_call* call) {
  volatile double* nowhere = (volatile double*)(uintptr_t)(8 + call->top_k);
  *nowhere = 1.0;
  return 0;
}

int hostile_abort(const cohort_kernel_call* call) {
  (void)call;
  fprintf(stderr, "hostile_abort: giving up\n");
  abort();
}

int hostile_exit(const cohort_kernel_call* call) {
  (void)call;
  exit(3);
}

static int deeper(volatile char* above, int n) {
  volatile char frame[4096];
  frame[0] = (char)n;
  frame[4095] = above != 0 ? above[0] : 0;
  return deeper(frame, n + 1) + frame[1];
}

int hostile_stack(const cohort_kernel_call* call) {
  (void)call;
  return deeper(0, 0);
}

int hostile_spin(const cohort_kernel_call* call) {
  (void)call;
  for (volatile unsigned long i = 0;; i = i + 1) {
  }
}

/* Allocates and touches 64 MiB blocks until `m` MiB or a refusal. */
int hostile_hog(const cohort_kernel_call* call) {
  uint64_t got = 0;
  while (got < call->m) {
    char* block = (char*)malloc(64u << 20);
    if (block == 0) {
      snprintf(call->error, call->error_size, "malloc refused after %llu MiB",
               (unsigned long long)got);
      return 5;
    }
    memset(block, 1, 64u << 20);
    got += 64;
  }
  return 0;
}
