#include "kernels/catalog.hpp"

#include <cblas.h>
#include <cmath>
#include <cstdio>
#include <limits>

#include "kernels/blas1.hpp"
#include "kernels/gemm.hpp"
#include "kernels/topk_cosine.hpp"

namespace cohort::kernels {

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
  auto raw = static_cast<uint8_t>(id);
  return is_known(raw) ? names[raw] : names[0];
}

bool is_known(uint8_t raw) {
  return raw >= static_cast<uint8_t>(kernel_id::axpy) &&
         raw <= static_cast<uint8_t>(kernel_id::topk_cosine);
}

std::optional<kernel_id> parse_kernel(std::string_view text) {
  for (auto id : all_kernels)
    if (name(id) == text)
      return id;
  return std::nullopt;
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

input_shape lengths(input_views inputs) {
  input_shape out;
  for (auto& in : inputs)
    out.push_back(in.size());
  return out;
}

std::string validate(kernel_id id, const kernel_args& args,
                     input_views inputs) {
  auto lens = lengths(inputs);
  return validate(id, args, input_lengths{lens});
}

namespace {

std::string validate_shape(kernel_id id, const kernel_args& args,
                           input_lengths inputs);

} // namespace

std::string validate(kernel_id id, const kernel_args& args,
                     input_lengths inputs) {
  if (auto err = validate_shape(id, args, inputs); !err.empty())
    return err;
  auto kn = name(id);
  if (!std::isfinite(args.alpha))
    return format("%.*s: alpha must be a finite number", int(kn.size()),
                  kn.data());
  // Every product of two valid dimensions fits 64 bits (each is below
  // 2^31); the output must also fit what one item may produce.
  uint64_t out = 0;
  if (id == kernel_id::gemm ? !product(args.m, args.n, out)
                            : (out = output_elements(id, args, inputs), false))
    out = std::numeric_limits<uint64_t>::max();
  if (out > max_output_elements)
    return format("%.*s: the output would have %llu elements, at most %llu "
                  "are allowed per item",
                  int(kn.size()), kn.data(), (unsigned long long)out,
                  (unsigned long long)max_output_elements);
  return {};
}

namespace {

std::string validate_shape(kernel_id id, const kernel_args& args,
                           input_lengths inputs) {
  if (!is_known(static_cast<uint8_t>(id)))
    return format("unknown kernel (id %d); known kernels: axpy, dot, nrm2, "
                  "reduce_sum, inclusive_scan, gemv, gemm, topk_cosine",
                  int(id));
  auto kn = name(id);
  if (inputs.size() != input_count(id))
    return format("%.*s takes %zu input buffer(s), got %zu", int(kn.size()),
                  kn.data(), input_count(id), inputs.size());
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

} // namespace

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

uint64_t output_bytes(kernel_id id, const kernel_args& args,
                      input_views inputs) {
  auto lens = lengths(inputs);
  return output_bytes(id, args, input_lengths{lens});
}

uint64_t output_bytes(kernel_id id, const kernel_args& args,
                      input_lengths inputs) {
  auto elems = output_elements(id, args, inputs);
  return id == kernel_id::topk_cosine
             ? elems * (sizeof(float) + sizeof(int64_t))
             : elems * sizeof(float);
}

kernel_cost cost(kernel_id id, const kernel_args& args, input_views inputs) {
  auto lens = lengths(inputs);
  return cost(id, args, input_lengths{lens});
}

kernel_cost cost(kernel_id id, const kernel_args& args, input_lengths inputs) {
  double in_bytes = 0;
  for (auto len : inputs)
    in_bytes += static_cast<double>(len) * sizeof(float);
  double bytes = in_bytes + static_cast<double>(output_bytes(id, args, inputs));
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
  auto lens = lengths(in);
  out.values.resize(output_elements(id, args, input_lengths{lens}));
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

void use_single_threaded_blas() {
  openblas_set_num_threads(1);
}

} // namespace cohort::kernels
