// Loading a bundle in isolation (kernels/bundle/isolation.hpp): its code
// loads first in cohort-kernel-probe, a child process; a shared object or
// GPU module that crashes or hangs the loader, or that the driver refuses,
// refuses the bundle and leaves this process (the node) running, with
// nothing of the bundle registered. GPU code goes through the fake CUDA
// plugin (tests/plugins/fake_cuda), whose module loader crashes on a
// `!crash` line and never returns on a `!hang` line.
#include <catch2/catch.hpp>

#include <chrono>

#include <sys/wait.h>

#include "actors/runtime.hpp"
#include "kernels/bundle/isolation.hpp"
#include "kernels/bundle/loader.hpp"
#include "kernels/registry.hpp"
#include "tests/devices/fake_gpu.hpp"
#include "tests/kernels/bundle/bundle_fixture.hpp"

using namespace cohort;
using namespace cohort::kernels;
using namespace cohort::kernels::bundle;
using cohort::test::temp_dir;

namespace {

struct signer {
  private_key key = std::move(*private_key::generate());
  trust_store trust() const {
    trust_store t;
    t.keys.push_back(key.public_key());
    return t;
  }
};

/// The node's isolation, with the fake CUDA plugin (two fake GPUs of one
/// kind) as its CUDA plugin and a short timeout.
isolation fake_gpu_isolation(
    std::chrono::milliseconds timeout = std::chrono::milliseconds{20'000}) {
  auto iso = devices::gpu::bundle_isolation(timeout);
  iso.plugins = {
      {"CUDA", std::string{COHORT_FAKE_PLUGIN_DIR} + "/libcohort-cuda.so"}};
  return iso;
}

using test::loaded_of;
using test::refusal_of;

/// A bundle whose scale_add also has CUDA code: a fake module image whose
/// lines after the magic are `module_lines`.
std::string gpu_bundle(const temp_dir& dir, const std::string& name,
                       const std::string& prefix,
                       const std::string& module_lines, const signer& s) {
  auto b = dir.file(name);
  auto text = test::acme_kernels_text(prefix);
  text.replace(text.find("  cpu_symbol: \"acme_scale_add\""), 0,
               "  cuda { blob: \"gpu/k.ptx\" function: \"scale_add\" }\n");
  test::make_bundle(b, name, text, nullptr);
  test::add_blob(b, "gpu/k.ptx",
                 std::string{testing::fake_gpu_api::module_magic} +
                     module_lines,
                 "CUDA_PTX");
  auto sig = sign_bundle(b, s.key);
  REQUIRE(std::holds_alternative<pb::BundleSignature>(sig));
  test::write_bytes(b + "/manifest.sig",
                    signature_text(std::get<pb::BundleSignature>(sig)));
  return b;
}

bool registered(const std::string& name) {
  return parse_kernel(name).has_value();
}

/// No child of this process is left unreaped (a zombie) or running.
void check_no_children() {
  int st = 0;
  errno = 0;
  CHECK(::waitpid(-1, &st, WNOHANG) <= 0);
}

} // namespace

TEST_CASE("a bundle's code loads first in a child process",
          "[kernels][bundle][isolation]") {
  temp_dir dir;
  signer s;
  auto b = dir.file("good");
  test::make_bundle(b, "good", test::acme_kernels_text("iso1"), &s.key);
  auto iso = devices::gpu::bundle_isolation();
  REQUIRE_FALSE(iso.helper.empty());
  auto got = loaded_of(load_bundle(b, s.trust(), iso));
  REQUIRE(got.probed.loaded.size() == 1);
  CHECK(got.probed.loaded[0] == "cpu/libacme.so on cpu");
  CHECK(registered("iso1.scale_add"));
  check_no_children();
}

TEST_CASE("a shared object that crashes its loader is refused, the node "
          "goes on",
          "[kernels][bundle][isolation]") {
  temp_dir dir;
  signer s;
  auto b = dir.file("crash");
  test::make_bundle(b, "crash", test::acme_kernels_text("iso2"), &s.key,
                    COHORT_UNRULY_CRASH);
  auto r =
      refusal_of(load_bundle(b, s.trust(), devices::gpu::bundle_isolation()));
  CHECK(r.reason == refusal::load_crashed);
  CHECK_THAT(r.detail, Catch::Contains("crashed (SIGSEGV)") &&
                           Catch::Contains("'cpu/libacme.so' on cpu"));
  CHECK_FALSE(registered("iso2.scale_add"));
  CHECK_FALSE(registered("iso2.histogram"));
  check_no_children();
  // The same names load from a sound bundle afterwards.
  auto ok = dir.file("sound");
  test::make_bundle(ok, "sound", test::acme_kernels_text("iso2"), &s.key);
  loaded_of(load_bundle(ok, s.trust(), devices::gpu::bundle_isolation()));
  CHECK(registered("iso2.scale_add"));
}

TEST_CASE("a shared object that hangs its loader is refused after the "
          "timeout",
          "[kernels][bundle][isolation]") {
  temp_dir dir;
  signer s;
  auto b = dir.file("hang");
  test::make_bundle(b, "hang", test::acme_kernels_text("iso3"), &s.key,
                    COHORT_UNRULY_HANG);
  auto t0 = std::chrono::steady_clock::now();
  auto r = refusal_of(load_bundle(
      b, s.trust(),
      devices::gpu::bundle_isolation(std::chrono::milliseconds{300})));
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(r.reason == refusal::load_hung);
  CHECK_THAT(r.detail, Catch::Contains("did not finish in 300 ms") &&
                           Catch::Contains("'cpu/libacme.so' on cpu") &&
                           Catch::Contains("killed"));
  // It came back: the child was killed, not waited for.
  CHECK(took < std::chrono::seconds{60});
  CHECK_FALSE(registered("iso3.scale_add"));
  check_no_children();
}

TEST_CASE("GPU code loads in the child through the node's plugin, once per "
          "kind of GPU",
          "[kernels][bundle][isolation]") {
  temp_dir dir;
  signer s;
  auto b = gpu_bundle(dir, "gpu", "iso4", "scale_add\n", s);
  auto got = loaded_of(load_bundle(b, s.trust(), fake_gpu_isolation()));
  // The fake plugin has two GPUs of one kind: one is enough.
  REQUIRE(got.probed.loaded.size() == 2);
  CHECK(got.probed.loaded[0] == "cpu/libacme.so on cpu");
  CHECK_THAT(got.probed.loaded[1],
             Catch::StartsWith("gpu/k.ptx on cuda0 (Fake GPU (test plugin)"));
  CHECK(has_gpu_code(*parse_kernel("iso4.scale_add"), true));
}

TEST_CASE("GPU code that crashes or hangs the driver's loader, or that it "
          "refuses, refuses the bundle",
          "[kernels][bundle][isolation]") {
  temp_dir dir;
  signer s;
  SECTION("a crash") {
    auto b = gpu_bundle(dir, "gcrash", "iso5", "!crash\nscale_add\n", s);
    auto r = refusal_of(load_bundle(b, s.trust(), fake_gpu_isolation()));
    CHECK(r.reason == refusal::load_crashed);
    CHECK_THAT(r.detail, Catch::Contains("SIGSEGV") &&
                             Catch::Contains("'gpu/k.ptx' on cuda0"));
    CHECK_FALSE(registered("iso5.scale_add"));
  }
  SECTION("a hang") {
    auto b = gpu_bundle(dir, "ghang", "iso6", "!hang\nscale_add\n", s);
    auto r = refusal_of(load_bundle(
        b, s.trust(), fake_gpu_isolation(std::chrono::milliseconds{500})));
    CHECK(r.reason == refusal::load_hung);
    CHECK_THAT(r.detail, Catch::Contains("'gpu/k.ptx' on cuda0"));
    CHECK_FALSE(registered("iso6.scale_add"));
  }
  SECTION("an image the JIT refuses") {
    auto b = dir.file("gbad");
    auto text = test::acme_kernels_text("iso7");
    text.replace(text.find("  cpu_symbol: \"acme_scale_add\""), 0,
                 "  cuda { blob: \"gpu/k.ptx\" function: \"scale_add\" }\n");
    test::make_bundle(b, "gbad", text, nullptr);
    test::add_blob(b, "gpu/k.ptx", ".version 8.0\n", "CUDA_PTX");
    auto sig = sign_bundle(b, s.key);
    REQUIRE(std::holds_alternative<pb::BundleSignature>(sig));
    test::write_bytes(b + "/manifest.sig",
                      signature_text(std::get<pb::BundleSignature>(sig)));
    auto r = refusal_of(load_bundle(b, s.trust(), fake_gpu_isolation()));
    CHECK(r.reason == refusal::load_failed);
    // The driver's words and its JIT's log.
    CHECK_THAT(r.detail, Catch::Contains("'gpu/k.ptx' on cuda0") &&
                             Catch::Contains("the driver refused it") &&
                             Catch::Contains("not a fake module image"));
    CHECK_FALSE(registered("iso7.scale_add"));
  }
  SECTION("an entry point missing") {
    auto b = gpu_bundle(dir, "gmiss", "iso8", "other\n", s);
    auto r = refusal_of(load_bundle(b, s.trust(), fake_gpu_isolation()));
    CHECK(r.reason == refusal::load_failed);
    CHECK_THAT(r.detail, Catch::Contains("has no entry point 'scale_add'"));
    CHECK_FALSE(registered("iso8.scale_add"));
  }
  check_no_children();
}

TEST_CASE("GPU code of a vendor the node has no plugin for is noted, not "
          "probed",
          "[kernels][bundle][isolation]") {
  temp_dir dir;
  signer s;
  // Would crash any loader that tried it.
  auto b = gpu_bundle(dir, "noplugin", "iso9", "!crash\nscale_add\n", s);
  auto iso = devices::gpu::bundle_isolation();
  iso.plugins.clear();
  auto got = loaded_of(load_bundle(b, s.trust(), iso));
  REQUIRE(got.probed.notes.size() == 1);
  CHECK_THAT(got.probed.notes[0],
             Catch::Contains("gpu/k.ptx") &&
                 Catch::Contains("the node has no CUDA plugin"));
}

TEST_CASE("without the helper program, bundles are refused with where it "
          "was looked for",
          "[kernels][bundle][isolation]") {
  temp_dir dir;
  signer s;
  auto b = dir.file("nohelper");
  test::make_bundle(b, "nohelper", test::acme_kernels_text("iso10"), &s.key);
  isolation iso;
  iso.searched = "/nowhere/cohort";
  auto r = refusal_of(load_bundle(b, s.trust(), iso));
  CHECK(r.reason == refusal::load_failed);
  CHECK_THAT(r.detail, Catch::Contains("no cohort-kernel-probe") &&
                           Catch::Contains("/nowhere/cohort"));
  iso.helper = "/nowhere/cohort/cohort-kernel-probe";
  r = refusal_of(load_bundle(b, s.trust(), iso));
  CHECK(r.reason == refusal::load_failed);
  CHECK_THAT(r.detail, Catch::Contains("cannot start"));
  CHECK_FALSE(registered("iso10.scale_add"));
}

TEST_CASE("a node whose config loads a crashing bundle starts, refuses it "
          "and counts it",
          "[kernels][bundle][isolation]") {
  test::actor_fixture f;
  signer s;
  auto bad = f.dir.file("crash");
  test::make_bundle(bad, "crash", test::acme_kernels_text("iso11"), &s.key,
                    COHORT_UNRULY_CRASH);
  auto cfg = test::make_config(f.dir, 1, {{"sim0", 1.0}});
  auto* kb = cfg.mutable_kernel_bundles();
  kb->add_trusted_key(test::write_public_key(f.dir, s.key));
  kb->add_load(bad);
  kb->set_load_timeout_ms(20'000);
  auto rt = actors::runtime::start(f.sys, cfg);
  REQUIRE(rt);
  auto counts = (*rt)->kernel_bundles();
  CHECK(counts.loaded == 0);
  CHECK(counts.refused == std::map<std::string, uint64_t>{{"load_crashed", 1}});
  auto again = (*rt)->load_kernel_bundle(bad);
  REQUIRE_FALSE(again);
  CHECK_THAT(describe(again.error()), Catch::Contains("load_crashed"));
  (*rt)->stop();
}
