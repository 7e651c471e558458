// Kernels registered in the node's process on GPUs in device host
// processes: which devices may run them, the code a host is sent once, the
// sizes the node works out for each launch, and how a host registers the
// node's kernels at the node's ids.
#include <catch2/catch.hpp>

#include <bitset>

#include "actors/balancer/host_kernels.hpp"
#include "kernels/registry.hpp"
#include "messages/errc.hpp"

using namespace cohort;
using namespace cohort::actors::balancer;

namespace {

// f64 x, y -> x elements; CUDA code (a stand-in image: nothing loads it
// here) whose launch takes (x + 1) / 2 threads; no HIP code.
kernel_id pair_kernel() {
  static const auto id = [] {
    kernels::kernel_def d;
    d.name = "test.hk_pair";
    d.signature.inputs = {{"x", kernels::dtype::f64},
                          {"y", kernels::dtype::f64}};
    d.signature.output = {"z", kernels::dtype::f64};
    d.output_elements = [](const kernels::kernel_args&,
                           kernels::input_lengths in) { return in[0]; };
    d.cpu = [](const kernels::kernel_args&, kernels::typed_inputs in) {
      kernels::kernel_output out;
      out.resize(kernels::dtype::f64, in[0].size);
      return out;
    };
    std::string image = "stand-in PTX";
    image.push_back('\0');
    d.cuda.kind = kernels::gpu_code::format::ptx;
    d.cuda.image = std::make_shared<const std::vector<uint8_t>>(image.begin(),
                                                                image.end());
    d.cuda.function = "hk_pair";
    d.cuda.block = 128;
    d.cuda.launch_elements = [](const kernels::kernel_args&,
                                kernels::input_lengths in) {
      return (in[0] + 1) / 2;
    };
    std::string why;
    auto id = kernels::register_kernel(std::move(d), why);
    INFO(why);
    REQUIRE(id);
    return *id;
  }();
  return id;
}

work_item pair_item(uint64_t n) {
  work_item w;
  w.id = 1;
  w.tenant = "t";
  w.kernel = pair_kernel();
  w.inputs = {host_buffer{std::vector<double>(n, 1.0)},
              host_buffer{std::vector<double>(n, 2.0)}};
  return w;
}

device_info hosted_gpu(device_kind kind, bool host_process,
                       const std::string& remote = "") {
  device_info d;
  d.name = "g";
  d.kind = kind;
  d.host_process = host_process;
  d.remote = remote;
  return d;
}

// The highest id no kernel of this process has (the registry hands out the
// lowest free ones).
kernel_id free_id() {
  for (unsigned i = kernels::max_kernels; i > 0; --i)
    if (kernels::find(kernel_id(i)) == nullptr)
      return kernel_id(i);
  FAIL("the kernel registry is full");
  return kernel_id{};
}

kernels::kernel_def node_def(const std::string& name) {
  kernels::kernel_def d;
  d.name = name;
  d.sized_by_caller = true;
  d.signature.inputs = {{"input0", kernels::dtype::f32}};
  d.signature.output = {"out", kernels::dtype::f32};
  std::string image = "PTX";
  image.push_back('\0');
  d.cuda.kind = kernels::gpu_code::format::ptx;
  d.cuda.image =
      std::make_shared<const std::vector<uint8_t>>(image.begin(), image.end());
  d.cuda.function = "f";
  return d;
}

} // namespace

TEST_CASE("which kernels are the node's own, and which devices outside its "
          "process run them",
          "[actors][balancer][host]") {
  work_item builtin;
  builtin.kernel = kernel_id::axpy;
  CHECK_FALSE(has_node_only(builtin));
  CHECK_FALSE(node_only(kernel_id::gemm));
  // The geo kernels ship with Cohort: every process registers them alike.
  auto geo = kernels::parse_kernel("geo.point_in_polygon");
  REQUIRE(geo);
  CHECK_FALSE(node_only(*geo));
  auto item = pair_item(10);
  CHECK(node_only(item.kernel));
  CHECK(has_node_only(item));
  // A built-in first stage with the node's kernel chained after it.
  auto chained = builtin;
  chained.then.push_back({pair_kernel(), {}, {}, 0});
  CHECK(has_node_only(chained));
  // A real GPU in a host process with code for its backend: yes.
  CHECK(host_runs(hosted_gpu(device_kind::cuda_gpu, true), item));
  // No HIP code; a remote host; a simulated GPU (CPU code only); and a GPU
  // of the node's own process, which is not this rule's to decide.
  CHECK_FALSE(host_runs(hosted_gpu(device_kind::hip_gpu, true), item));
  CHECK_FALSE(
      host_runs(hosted_gpu(device_kind::cuda_gpu, true, "n2:9471"), item));
  auto sim = hosted_gpu(device_kind::sim_gpu, true);
  sim.simulated = true;
  CHECK_FALSE(host_runs(sim, item));
  CHECK_FALSE(host_runs(hosted_gpu(device_kind::cuda_gpu, false), item));
}

TEST_CASE("a host is sent a kernel's code once, and each launch's sizes",
          "[actors][balancer][host]") {
  auto cuda = hosted_gpu(device_kind::cuda_gpu, true);
  auto item = pair_item(1001);
  // The same kernel chained after itself: its second stage takes the
  // first's output in slot 1.
  item.then.push_back(
      {pair_kernel(), {}, {host_buffer{std::vector<double>(1001, 3.0)}}, 1});
  std::bitset<256> sent;
  auto code = code_to_send(cuda, item, sent);
  REQUIRE(code.size() == 1);
  auto& c = code[0];
  CHECK(c.id == uint8_t(pair_kernel()));
  CHECK(c.name == "test.hk_pair");
  CHECK(c.origin == "application");
  CHECK(c.inputs == std::vector<uint8_t>{uint8_t(kernels::dtype::f64),
                                         uint8_t(kernels::dtype::f64)});
  CHECK(c.output == uint8_t(kernels::dtype::f64));
  CHECK(c.format == uint8_t(kernels::gpu_code::format::ptx));
  CHECK(c.function == "hk_pair");
  CHECK(c.block == 128);
  CHECK(c.image.size() == std::string{"stand-in PTX"}.size() + 1);
  CHECK(sent.test(uint8_t(pair_kernel())));
  // Sent already.
  CHECK(code_to_send(cuda, item, sent).empty());
  // Nothing for a backend it has no code for.
  std::bitset<256> none;
  CHECK(
      code_to_send(hosted_gpu(device_kind::hip_gpu, true), item, none).empty());
  CHECK(none.none());
  // Per stage: the output's elements and the launch's threads.
  CHECK(*launch_sizes(cuda, item) ==
        std::vector<uint64_t>{1001, 501, 1001, 501});
  // A built-in stage's threads are its elements.
  work_item scan;
  scan.kernel = kernel_id::inclusive_scan;
  scan.inputs = {host_buffer{std::vector<float>(77, 1.0f)}};
  CHECK(*launch_sizes(cuda, scan) == std::vector<uint64_t>{77, 77});
  // A host process that could not register the kernel: marked, for items
  // of it in any stage.
  std::bitset<256> refused_here;
  CHECK_FALSE(refused(refused_here, item));
  mark_refused(refused_here, scan);
  CHECK(refused_here.none());
  mark_refused(refused_here, item);
  CHECK(refused_here.count() == 1);
  CHECK(refused(refused_here, item));
  CHECK_FALSE(refused(refused_here, scan));
  auto chained = scan;
  chained.then.push_back({pair_kernel(), {}, {}, 0});
  CHECK(refused(refused_here, chained));
}

TEST_CASE("a size rule that throws on the node ends the item, not the "
          "balancer",
          "[actors][balancer][host]") {
  static const auto id = [] {
    kernels::kernel_def d;
    d.name = "test.hk_throws";
    d.signature.inputs = {{"x", kernels::dtype::f32}};
    d.output_elements = [](const kernels::kernel_args&,
                           kernels::input_lengths in) { return in[0]; };
    d.cpu = [](const kernels::kernel_args&, kernels::typed_inputs) {
      return kernels::kernel_output{};
    };
    std::string image = "PTX";
    image.push_back('\0');
    d.cuda.kind = kernels::gpu_code::format::ptx;
    d.cuda.image = std::make_shared<const std::vector<uint8_t>>(image.begin(),
                                                                image.end());
    d.cuda.function = "f";
    d.cuda.launch_elements = [](const kernels::kernel_args&,
                                kernels::input_lengths) -> uint64_t {
      throw kernels::kernel_failure{"no threads for you"};
    };
    std::string why;
    auto id = kernels::register_kernel(std::move(d), why);
    INFO(why);
    REQUIRE(id);
    return *id;
  }();
  work_item w;
  w.kernel = id;
  w.inputs = {host_buffer{std::vector<float>(8, 1.0f)}};
  auto sizes = launch_sizes(hosted_gpu(device_kind::cuda_gpu, true), w);
  REQUIRE_FALSE(sizes);
  CHECK(code_of(sizes.error()) == errc::kernel_error);
  CHECK_THAT(describe(sizes.error()), Catch::Contains("no threads for you"));
}

TEST_CASE("a device host registers the node's kernels at the node's ids",
          "[actors][host][kernels]") {
  auto id = free_id();
  // Only a node's kernel (GPU code alone, sized by the node) this way.
  auto plain = node_def("test.hk_plain");
  plain.sized_by_caller = false;
  CHECK_THAT(kernels::register_node_kernel(id, plain),
             Catch::Contains("sized_by_caller"));
  auto no_code = node_def("test.hk_nocode");
  no_code.cuda = {};
  CHECK_THAT(kernels::register_node_kernel(id, no_code),
             Catch::Contains("no GPU code"));
  auto bad_ptx = node_def("test.hk_badptx");
  bad_ptx.cuda.image = std::make_shared<const std::vector<uint8_t>>(
      std::vector<uint8_t>{'P', 'T', 'X'});
  CHECK_THAT(kernels::register_node_kernel(id, bad_ptx),
             Catch::Contains("NUL"));
  CHECK(kernels::find(id) == nullptr);
  CHECK_THAT(kernels::register_node_kernel(kernel_id{0}, node_def("test.hk0")),
             Catch::Contains("id 0"));
  // At the free id: found there, by name.
  REQUIRE(kernels::register_node_kernel(id, node_def("test.hk_node")) == "");
  auto* d = kernels::find(id);
  REQUIRE(d != nullptr);
  CHECK(d->name == "test.hk_node");
  CHECK(d->sized_by_caller);
  CHECK(kernels::parse_kernel("test.hk_node") == id);
  // Sent again (a new device actor in the same process): nothing changes.
  CHECK(kernels::register_node_kernel(id, node_def("test.hk_node")) == "");
  CHECK(kernels::find(id) == d);
  // Another kernel at that id, or the same name at another id: refused.
  CHECK_THAT(kernels::register_node_kernel(id, node_def("test.hk_other")),
             Catch::Contains("is kernel 'test.hk_node'"));
  CHECK_THAT(kernels::register_node_kernel(free_id(), node_def("test.hk_node")),
             Catch::Contains("already registered at id"));
  // The id of a kernel every process has, under another name.
  CHECK_THAT(
      kernels::register_node_kernel(kernel_id::axpy, node_def("test.hk_axpy")),
      Catch::Contains("is kernel 'axpy'"));
}
