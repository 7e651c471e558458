// Naive reference implementations and the comparison used by tests and by
// `cohort run` to check every result. Everything accumulates in double,
// in the most obvious order; nothing here is meant to be fast.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "kernels/builtin.hpp"

namespace cohort::kernels::builtin {

namespace {

std::vector<double> ref_linear(kernel_id id, const kernel_args& args,
                               input_views in, bool absolute) {
  auto v = [absolute](double x) { return absolute ? std::fabs(x) : x; };
  std::vector<double> out;
  switch (id) {
  case kernel_id::axpy:
    for (size_t i = 0; i < in[0].size(); ++i)
      out.push_back(v(args.alpha) * v(in[0][i]) + v(in[1][i]));
    break;
  case kernel_id::dot: {
    double s = 0;
    for (size_t i = 0; i < in[0].size(); ++i)
      s += v(in[0][i]) * v(in[1][i]);
    out.push_back(s);
    break;
  }
  case kernel_id::reduce_sum:
  case kernel_id::inclusive_scan: {
    double s = 0;
    for (float x : in[0]) {
      s += v(x);
      if (id == kernel_id::inclusive_scan)
        out.push_back(s);
    }
    if (id == kernel_id::reduce_sum)
      out.push_back(s);
    break;
  }
  case kernel_id::gemv:
    for (uint64_t r = 0; r < args.m; ++r) {
      double s = 0;
      for (uint64_t c = 0; c < args.n; ++c)
        s += v(in[0][r * args.n + c]) * v(in[1][c]);
      out.push_back(s);
    }
    break;
  case kernel_id::gemm:
    out.assign(args.m * args.n, 0.0);
    for (uint64_t r = 0; r < args.m; ++r)
      for (uint64_t p = 0; p < args.k; ++p) {
        double a = v(in[0][r * args.k + p]);
        for (uint64_t c = 0; c < args.n; ++c)
          out[r * args.n + c] += a * v(in[1][p * args.n + c]);
      }
    break;
  default:
    break;
  }
  return out;
}

double norm(std::span<const float> x) {
  double s = 0;
  for (float v : x)
    s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

// Length of the sum behind each output element, for the rounding bound.
double reduction_length(kernel_id id, const kernel_args& args, input_views in) {
  switch (id) {
  case kernel_id::axpy:
    return 1;
  case kernel_id::gemv:
    return static_cast<double>(args.n);
  case kernel_id::gemm:
    return static_cast<double>(args.k);
  default:
    return static_cast<double>(in[0].size());
  }
}

std::string mismatch(kernel_id id, size_t i, double got, double want,
                     double tol) {
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "%s: element %zu is %.9g, reference %.9g (tolerance %.3g)",
                std::string{builtin::name(id)}.c_str(), i, got, want, tol);
  return buf;
}

} // namespace

kernel_output run_reference(kernel_id id, const kernel_args& args,
                            input_views in) {
  kernel_output out;
  if (id == kernel_id::nrm2) {
    out.values.push_back(static_cast<float>(norm(in[0])));
    return out;
  }
  if (id == kernel_id::topk_cosine) {
    const uint64_t dim = args.n;
    const uint64_t q = in[1].size() / dim;
    std::vector<std::pair<double, int64_t>> sims(args.m);
    for (uint64_t j = 0; j < q; ++j) {
      auto query = in[1].subspan(j * dim, dim);
      double qn = norm(query);
      for (uint64_t r = 0; r < args.m; ++r) {
        auto row = in[0].subspan(r * dim, dim);
        double d = 0;
        for (uint64_t c = 0; c < dim; ++c)
          d += static_cast<double>(row[c]) * query[c];
        double denom = norm(row) * qn;
        sims[r] = {denom > 0 ? d / denom : 0.0, static_cast<int64_t>(r)};
      }
      std::sort(sims.begin(), sims.end(), [](auto& a, auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      });
      for (uint32_t t = 0; t < args.top_k; ++t) {
        out.values.push_back(static_cast<float>(sims[t].first));
        out.indices.push_back(sims[t].second);
      }
    }
    return out;
  }
  for (double x : ref_linear(id, args, in, false))
    out.values.push_back(static_cast<float>(x));
  return out;
}

std::string compare(kernel_id id, const kernel_args& args, input_views in,
                    const kernel_output& got, const kernel_output& want) {
  if (got.values.size() != want.values.size() ||
      got.indices.size() != want.indices.size()) {
    char buf[160];
    std::snprintf(
        buf, sizeof(buf),
        "%s: result has %zu values / %zu indices, reference %zu / %zu",
        std::string{builtin::name(id)}.c_str(), got.values.size(),
        got.indices.size(), want.values.size(), want.indices.size());
    return buf;
  }
  constexpr double eps = std::numeric_limits<float>::epsilon();
  if (id == kernel_id::nrm2) {
    double tol = 4 * eps * want.values[0] + 1e-30;
    if (std::fabs(got.values[0] - want.values[0]) > tol)
      return mismatch(id, 0, got.values[0], want.values[0], tol);
    return {};
  }
  if (id == kernel_id::topk_cosine) {
    // Similarities are in [-1, 1]; rounding of a dim-long dot product bounds
    // the error. Scores must match the reference's ranked scores, and each
    // returned row must really have (in double) the score it is listed with,
    // so rows that tie within rounding may come in either order.
    const double tol = (8 + 2 * std::sqrt(double(args.n))) * eps;
    const uint64_t dim = args.n;
    for (size_t i = 0; i < got.values.size(); ++i) {
      if (!(std::fabs(double(got.values[i]) - want.values[i]) <= tol))
        return mismatch(id, i, got.values[i], want.values[i], tol);
      if (got.indices[i] == want.indices[i])
        continue;
      int64_t row = got.indices[i];
      if (row < 0 || uint64_t(row) >= args.m)
        return mismatch(id, i, double(row), double(want.indices[i]), 0);
      auto r = in[0].subspan(row * dim, dim);
      auto query = in[1].subspan(i / args.top_k * dim, dim);
      double d = 0;
      for (uint64_t c = 0; c < dim; ++c)
        d += double(r[c]) * query[c];
      double denom = norm(r) * norm(query);
      double sim = denom > 0 ? d / denom : 0.0;
      if (!(std::fabs(sim - want.values[i]) <= 2 * tol))
        return mismatch(id, i, double(row), double(want.indices[i]), 0);
    }
    return {};
  }
  // Linear kernels: |got - want| <= c * eps * (the same sum over |terms|).
  auto bound = ref_linear(id, args, in, true);
  double c = 4 + 2 * std::sqrt(reduction_length(id, args, in));
  for (size_t i = 0; i < got.values.size(); ++i) {
    double tol = c * eps * bound[i] + 1e-30;
    if (!(std::fabs(double(got.values[i]) - want.values[i]) <= tol))
      return mismatch(id, i, got.values[i], want.values[i], tol);
  }
  return {};
}

} // namespace cohort::kernels::builtin
