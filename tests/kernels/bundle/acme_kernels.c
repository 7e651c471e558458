/* CPU kernels of the test bundles (tests/kernels/bundle/bundle_test.cpp),
 * written in C against include/cohort/kernel_abi.h, the way a bundle's
 * author would write them. */
#include <stdio.h>

#include "cohort/kernel_abi.h"

/* out[i] = alpha * x[i] + y[i], in double precision. */
int acme_scale_add(const cohort_kernel_call* call) {
  if (call->abi_version != COHORT_KERNEL_ABI_VERSION)
    return 1;
  const double* x = (const double*)call->inputs[0].data;
  const double* y = (const double*)call->inputs[1].data;
  double* out = (double*)call->output;
  for (uint64_t i = 0; i < call->output_length; ++i)
    out[i] = call->alpha * x[i] + y[i];
  return 0;
}

/* Counts of each byte value in `bytes`: 256 int64 bins. */
int acme_histogram(const cohort_kernel_call* call) {
  const uint8_t* in = (const uint8_t*)call->inputs[0].data;
  int64_t* bins = (int64_t*)call->output;
  for (uint64_t i = 0; i < call->inputs[0].length; ++i)
    bins[in[i]] += 1;
  return 0;
}

/* Fails when any input value is negative, with a message. */
int acme_checked_sum(const cohort_kernel_call* call) {
  const int32_t* in = (const int32_t*)call->inputs[0].data;
  int64_t total = 0;
  for (uint64_t i = 0; i < call->inputs[0].length; ++i) {
    if (in[i] < 0) {
      snprintf(call->error, call->error_size, "value %d at %llu is negative",
               (int)in[i], (unsigned long long)i);
      return 2;
    }
    total += in[i];
  }
  ((int64_t*)call->output)[0] = total;
  return 0;
}
