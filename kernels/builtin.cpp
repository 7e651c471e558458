// The built-in kernels' shapes, costs and CPU dispatch (registered in
// registry.cpp like any other kernel).
#include "kernels/builtin.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "kernels/blas1.hpp"
#include "kernels/gemm.hpp"
#include "kernels/topk_cosine.hpp"

namespace cohort::kernels::builtin {

namespace {

constexpr std::string_view names[] = {
    "unknown",        "axpy", "dot",  "nrm2",        "reduce_sum",
    "inclusive_scan", "gemv", "gemm", "topk_cosine",
};

// BLAS takes 32-bit dimensions.
constexpr uint64_t max_dim = std::numeric_limits<int32_t>::max();

std::string format(const char* fmt, auto... xs) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, xs...);
  return buf;
}

bool product(uint64_t a, uint64_t b, uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

std::string check_matrix(std::string_view kernel, const char* what,
                         uint64_t rows, uint64_t cols, uint64_t have) {
  uint64_t want = 0;
  if (rows > max_dim || cols > max_dim || !product(rows, cols, want))
    return format("%.*s: %s dimensions %llux%llu are too large",
                  int(kernel.size()), kernel.data(), what,
                  (unsigned long long)rows, (unsigned long long)cols);
  if (want != have)
    return format("%.*s: %s must have %llux%llu = %llu elements, got %llu",
                  int(kernel.size()), kernel.data(), what,
                  (unsigned long long)rows, (unsigned long long)cols,
                  (unsigned long long)want, (unsigned long long)have);
  return {};
}

} // namespace

std::string_view name(kernel_id id) {
  return names[static_cast<uint8_t>(id)];
}

std::vector<std::string> scalars(kernel_id id) {
  switch (id) {
  case kernel_id::axpy:
    return {"alpha"};
  case kernel_id::gemv:
    return {"m", "n"};
  case kernel_id::gemm:
    return {"m", "n", "k"};
  case kernel_id::topk_cosine:
    return {"m", "n", "top_k"};
  default:
    return {};
  }
}

size_t input_count(kernel_id id) {
  switch (id) {
  case kernel_id::nrm2:
  case kernel_id::reduce_sum:
  case kernel_id::inclusive_scan:
    return 1;
  default:
    return 2;
  }
}

std::string check(kernel_id id, const kernel_args& args, input_lengths inputs) {
  auto kn = builtin::name(id);
  switch (id) {
  case kernel_id::axpy:
  case kernel_id::dot:
    if (inputs[0] != inputs[1])
      return format("%.*s: x has %llu elements but y has %llu", int(kn.size()),
                    kn.data(), (unsigned long long)inputs[0],
                    (unsigned long long)inputs[1]);
    return {};
  case kernel_id::nrm2:
  case kernel_id::reduce_sum:
  case kernel_id::inclusive_scan:
    return {};
  case kernel_id::gemv:
    if (auto err = check_matrix(kn, "A", args.m, args.n, inputs[0]);
        !err.empty())
      return err;
    if (inputs[1] != args.n)
      return format("gemv: x must have n = %llu elements, got %llu",
                    (unsigned long long)args.n, (unsigned long long)inputs[1]);
    return {};
  case kernel_id::gemm:
    if (auto err = check_matrix(kn, "A", args.m, args.k, inputs[0]);
        !err.empty())
      return err;
    return check_matrix(kn, "B", args.k, args.n, inputs[1]);
  case kernel_id::topk_cosine: {
    if (args.n == 0)
      return "topk_cosine: the vector dimension n must be positive";
    if (auto err = check_matrix(kn, "rows", args.m, args.n, inputs[0]);
        !err.empty())
      return err;
    if (inputs[1] == 0 || inputs[1] % args.n != 0)
      return format("topk_cosine: queries must hold a positive multiple of "
                    "n = %llu elements, got %llu",
                    (unsigned long long)args.n, (unsigned long long)inputs[1]);
    if (args.top_k == 0 || args.top_k > args.m)
      return format("topk_cosine: top_k must be in 1..m = %llu, got %u",
                    (unsigned long long)args.m, args.top_k);
    return {};
  }
  }
  return "unreachable";
}

uint64_t output_elements(kernel_id id, const kernel_args& args,
                         input_lengths inputs) {
  switch (id) {
  case kernel_id::axpy:
  case kernel_id::inclusive_scan:
    return inputs[0];
  case kernel_id::dot:
  case kernel_id::nrm2:
  case kernel_id::reduce_sum:
    return 1;
  case kernel_id::gemv:
    return args.m;
  case kernel_id::gemm:
    return args.m * args.n;
  case kernel_id::topk_cosine:
    return inputs[1] / args.n * args.top_k;
  }
  return 0;
}

kernel_cost cost(kernel_id id, const kernel_args& args, input_lengths inputs) {
  // The registry adds the bytes.
  const double bytes = 0;
  double n = inputs.empty() ? 0 : static_cast<double>(inputs[0]);
  switch (id) {
  case kernel_id::axpy:
  case kernel_id::dot:
  case kernel_id::nrm2:
    return {2 * n, bytes};
  case kernel_id::reduce_sum:
  case kernel_id::inclusive_scan:
    return {n, bytes};
  case kernel_id::gemv:
    return {2.0 * args.m * args.n, bytes};
  case kernel_id::gemm:
    return {2.0 * args.m * args.n * args.k, bytes};
  case kernel_id::topk_cosine: {
    double q = static_cast<double>(inputs[1]) / args.n;
    return {2.0 * q * args.m * args.n + 2.0 * args.m * args.n, bytes};
  }
  }
  return {};
}

kernel_output run_cpu(kernel_id id, const kernel_args& args, input_views in) {
  kernel_output out;
  input_shape lens;
  for (auto& x : in)
    lens.push_back(x.size());
  out.values.resize(builtin::output_elements(id, args, input_lengths{lens}));
  std::span<float> o{out.values};
  switch (id) {
  case kernel_id::axpy:
    cpu::axpy(args.alpha, in[0], in[1], o);
    break;
  case kernel_id::dot:
    o[0] = cpu::dot(in[0], in[1]);
    break;
  case kernel_id::nrm2:
    o[0] = cpu::nrm2(in[0]);
    break;
  case kernel_id::reduce_sum:
    o[0] = cpu::reduce_sum(in[0]);
    break;
  case kernel_id::inclusive_scan:
    cpu::inclusive_scan(in[0], o);
    break;
  case kernel_id::gemv:
    cpu::gemv(args.m, args.n, in[0], in[1], o);
    break;
  case kernel_id::gemm:
    cpu::gemm(args.m, args.n, args.k, in[0], in[1], o);
    break;
  case kernel_id::topk_cosine:
    out.indices.resize(out.values.size());
    cpu::topk_cosine(args.m, args.n, args.top_k, in[0], in[1], out.indices, o);
    break;
  }
  return out;
}

} // namespace cohort::kernels::builtin
