/* The geo demo's own kernel, shipped as a signed bundle (bundle/, signed by
 * the build; docs/pipelines.md): each point's weight by where it lies,
 * its whole weight inside its zone, `alpha` of it on the zone's edge,
 * nothing outside (or for an invalid point). */
#include <cohort/kernel_abi.h>
#include <stdio.h>

int demo_weigh(const cohort_kernel_call* call) {
  const int32_t* location = (const int32_t*)call->inputs[0].data;
  const float* weight = (const float*)call->inputs[1].data;
  float* out = (float*)call->output;
  if (call->alpha < 0 || call->alpha > 1) {
    snprintf(call->error, call->error_size,
             "alpha (the edge's share) must be in 0..1, not %g", call->alpha);
    return 1;
  }
  for (uint64_t i = 0; i < call->output_length; ++i) {
    if (location[i] == 1)
      out[i] = weight[i];
    else if (location[i] == 2)
      out[i] = (float)(call->alpha * weight[i]);
  }
  return 0;
}
