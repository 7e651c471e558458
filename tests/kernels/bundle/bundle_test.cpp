// Signed kernel bundles (kernels/bundle/bundle.hpp, loader.hpp): a good
// bundle loads and its C kernels run; every way a bundle can be wrong is
// refused with its reason; a runtime audits, counts and alerts refusals.
#include <catch2/catch.hpp>

#include <filesystem>
#include <thread>

#include <sys/stat.h>

#include "actors/runtime.hpp"
#include "kernels/bundle/loader.hpp"
#include "kernels/registry.hpp"
#include "tests/kernels/bundle/bundle_fixture.hpp"

using namespace cohort;
using namespace cohort::kernels;
using namespace cohort::kernels::bundle;
using cohort::test::temp_dir;

namespace {

private_key new_key() {
  auto k = private_key::generate();
  REQUIRE(k);
  return std::move(*k);
}

trust_store trusting(const private_key& key) {
  trust_store t;
  t.keys.push_back(key.public_key());
  return t;
}

using test::loaded_of;
using test::refusal_of;

// Signs the manifest's bytes as they are, without sign_bundle's checks: a
// trusted signer's mistakes must still be refused at load.
void sign_raw(const std::string& dir, const private_key& key) {
  auto text = test::read_bytes(dir + "/manifest.textproto");
  auto s =
      key.sign({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  pb::BundleSignature sig;
  sig.set_key_id(key.public_key().id());
  sig.set_ed25519(to_hex(s));
  test::write_bytes(dir + "/manifest.sig", signature_text(sig));
}

std::string manifest_sha(const std::string& dir) {
  auto m = read_manifest(dir);
  REQUIRE(std::holds_alternative<manifest_bytes>(m));
  return std::get<manifest_bytes>(m).sha256;
}

kernel_output run(kernel_id id, const kernel_args& a,
                  std::vector<typed_view> in) {
  auto lens = std::vector<uint64_t>{};
  for (auto& v : in)
    lens.push_back(v.size);
  REQUIRE(validate(id, a, input_lengths{lens}) == "");
  return run_cpu(id, a, typed_inputs{in});
}

} // namespace

TEST_CASE("a signed bundle's C kernels load into the registry and run",
          "[kernels][bundle]") {
  temp_dir dir;
  auto key = new_key();
  auto b = dir.file("acme");
  test::make_bundle(b, "acme", test::acme_kernels_text("bt1"), &key);
  auto got = loaded_of(test::load_here(b, trusting(key)));
  CHECK(got.name == "acme");
  CHECK(got.version == "1.0.0");
  CHECK(got.key_id == key.public_key().id());
  CHECK(got.manifest_sha256 == manifest_sha(b));
  CHECK(got.fresh);
  REQUIRE(got.kernels.size() == 3);
  CHECK(got.kernels[0].first == "bt1.scale_add");
  auto scale_add = got.kernels[0].second;
  auto histogram = got.kernels[1].second;
  auto checked_sum = got.kernels[2].second;
  CHECK(parse_kernel("bt1.histogram") == histogram);
  auto* def = find(scale_add);
  REQUIRE(def != nullptr);
  CHECK(def->origin == "bundle acme 1.0.0 (key " + key.public_key().id() + ")");
  CHECK(def->signature.inputs[1].name == "y");
  CHECK(def->signature.output.type == dtype::f64);

  // alpha * x + y in double precision, through the C ABI.
  std::vector<double> x{1, 2, 3}, y{0.5, 0.25, 1e-9};
  kernel_args a;
  a.alpha = 2;
  auto out =
      run(scale_add, a, {{x.data(), 3, dtype::f64}, {y.data(), 3, dtype::f64}});
  REQUIRE(out.type == dtype::f64);
  auto z = out.as<double>();
  REQUIRE(z.size() == 3);
  CHECK(z[0] == 2.5);
  CHECK(z[1] == 4.25);
  CHECK(z[2] == 6 + 1e-9);
  // The manifest's rules: its require, its output size, its flops.
  std::vector<uint64_t> unequal{3, 2};
  CHECK(validate(scale_add, a, input_lengths{unequal}) ==
        "bt1.scale_add: require 'x == y' does not hold");
  std::vector<uint64_t> three{3, 3};
  CHECK(output_elements(scale_add, a, input_lengths{three}) == 3);
  CHECK(cost(scale_add, a, input_lengths{three}).flops == 6);
  // u8 in, 256 i64 bins out.
  std::vector<uint8_t> bytes{0, 255, 7, 7, 7};
  auto bins = run(histogram, {}, {{bytes.data(), bytes.size(), dtype::u8}});
  REQUIRE(bins.as<int64_t>().size() == 256);
  CHECK(bins.as<int64_t>()[7] == 3);
  CHECK(bins.as<int64_t>()[255] == 1);
  // A kernel that fails says why, through kernel_failure.
  std::vector<int32_t> vals{4, -2};
  CHECK_THROWS_WITH(run(checked_sum, {}, {{vals.data(), 2, dtype::i32}}),
                    Catch::Contains("bt1.checked_sum: value -2 at 1 is "
                                    "negative"));
  vals = {4, 5};
  CHECK(run(checked_sum, {}, {{vals.data(), 2, dtype::i32}}).as<int64_t>()[0] ==
        9);

  // Loaded again (another runtime of the process, a restart): the same
  // kernels, nothing loaded twice.
  auto again = loaded_of(test::load_here(b, trusting(key)));
  CHECK_FALSE(again.fresh);
  CHECK(again.kernels == got.kernels);
}

TEST_CASE("bundles that are not signed by a trusted key are refused",
          "[kernels][bundle]") {
  temp_dir dir;
  auto key = new_key();
  auto other = new_key();
  auto b = dir.file("acme");
  test::make_bundle(b, "acme", test::acme_kernels_text("bt2"), nullptr);
  auto r = refusal_of(test::load_here(b, trusting(key)));
  CHECK(r.reason == refusal::unsigned_bundle);
  CHECK_THAT(r.detail, Catch::Contains("no manifest.sig"));
  sign_raw(b, other);
  r = refusal_of(test::load_here(b, trusting(key)));
  CHECK(r.reason == refusal::unknown_key);
  CHECK_THAT(r.detail, Catch::Contains(other.public_key().id()));
  CHECK(refusal_of(test::load_here(b, trust_store{})).reason ==
        refusal::unknown_key);
  // Trusted, then revoked.
  auto t = trusting(other);
  t.revoked_keys.insert(other.public_key().id());
  r = refusal_of(test::load_here(b, t));
  CHECK(r.reason == refusal::revoked_key);
  CHECK_THAT(r.detail, Catch::Contains("revoked"));
  // The bundle itself revoked, by its manifest's digest.
  t = trusting(other);
  t.revoked_bundles.insert(manifest_sha(b));
  CHECK(refusal_of(test::load_here(b, t)).reason == refusal::revoked_bundle);
  // Nothing was registered along the way.
  CHECK_FALSE(parse_kernel("bt2.scale_add"));
  // A signature file that is not one.
  test::write_bytes(b + "/manifest.sig", "key_id: \"nothex\"\n");
  CHECK(refusal_of(test::load_here(b, trusting(other))).reason ==
        refusal::malformed);
}

TEST_CASE("a bundle changed after signing is refused", "[kernels][bundle]") {
  temp_dir dir;
  auto key = new_key();
  auto b = dir.file("acme");
  SECTION("the manifest, by one comment line") {
    test::make_bundle(b, "acme", test::acme_kernels_text("bt3"), &key);
    test::write_bytes(b + "/manifest.textproto",
                      test::read_bytes(b + "/manifest.textproto") + "# hi\n");
    auto r = refusal_of(test::load_here(b, trusting(key)));
    CHECK(r.reason == refusal::bad_signature);
    CHECK_THAT(r.detail, Catch::Contains("does not match the manifest"));
  }
  SECTION("a blob, by one bit") {
    test::make_bundle(b, "acme", test::acme_kernels_text("bt3"), &key);
    auto so = test::read_bytes(b + "/cpu/libacme.so");
    so[so.size() / 2] ^= 1;
    test::write_bytes(b + "/cpu/libacme.so", so);
    auto r = refusal_of(test::load_here(b, trusting(key)));
    CHECK(r.reason == refusal::tampered_blob);
    CHECK_THAT(r.detail, Catch::Contains("blob 'cpu/libacme.so' has SHA-256"));
  }
  SECTION("a blob, cut short") {
    test::make_bundle(b, "acme", test::acme_kernels_text("bt3"), &key);
    auto so = test::read_bytes(b + "/cpu/libacme.so");
    test::write_bytes(b + "/cpu/libacme.so", so.substr(0, 100));
    auto r = refusal_of(test::load_here(b, trusting(key)));
    CHECK(r.reason == refusal::tampered_blob);
    CHECK_THAT(r.detail, Catch::Contains("has 100 bytes"));
  }
  SECTION("a blob replaced by a symbolic link") {
    test::make_bundle(b, "acme", test::acme_kernels_text("bt3"), &key);
    std::filesystem::rename(b + "/cpu/libacme.so", dir.file("elsewhere.so"));
    std::filesystem::create_symlink(dir.file("elsewhere.so"),
                                    b + "/cpu/libacme.so");
    auto r = refusal_of(test::load_here(b, trusting(key)));
    CHECK(r.reason == refusal::unreadable);
    CHECK_THAT(r.detail, Catch::Contains("symbolic link"));
  }
  SECTION("a blob replaced by a FIFO (opening it must not hang)") {
    test::make_bundle(b, "acme", test::acme_kernels_text("bt3"), &key);
    std::filesystem::remove(b + "/cpu/libacme.so");
    REQUIRE(::mkfifo((b + "/cpu/libacme.so").c_str(), 0600) == 0);
    auto r = refusal_of(test::load_here(b, trusting(key)));
    CHECK(r.reason == refusal::unreadable);
    CHECK_THAT(r.detail, Catch::Contains("not a regular file"));
  }
  SECTION("a blob missing") {
    test::make_bundle(b, "acme", test::acme_kernels_text("bt3"), &key);
    std::filesystem::remove(b + "/cpu/libacme.so");
    CHECK(refusal_of(test::load_here(b, trusting(key))).reason ==
          refusal::unreadable);
  }
  CHECK_FALSE(parse_kernel("bt3.scale_add"));
}

TEST_CASE("a trusted signer's mistakes are refused at load",
          "[kernels][bundle]") {
  temp_dir dir;
  auto key = new_key();
  auto b = dir.file("acme");
  SECTION("a symbol the shared object lacks") {
    auto text = test::acme_kernels_text("bt4");
    text.replace(text.find("acme_histogram"), 14, "acme_histogrom");
    test::make_bundle(b, "acme", text, &key);
    auto r = refusal_of(test::load_here(b, trusting(key)));
    CHECK(r.reason == refusal::load_failed);
    CHECK_THAT(r.detail, Catch::Contains("no symbol 'acme_histogrom'"));
  }
  SECTION("a path out of the bundle") {
    test::make_bundle(b, "acme", test::acme_kernels_text("bt4"), &key);
    auto m = test::read_bytes(b + "/manifest.textproto");
    for (std::string::size_type at;
         (at = m.find("cpu/libacme.so")) != std::string::npos;)
      m.replace(at, 14, "../libacme.so");
    test::write_bytes(b + "/manifest.textproto", m);
    sign_raw(b, key);
    auto r = refusal_of(test::load_here(b, trusting(key)));
    CHECK(r.reason == refusal::malformed);
    CHECK_THAT(r.detail, Catch::Contains("not a valid path"));
  }
  CHECK_FALSE(parse_kernel("bt4.scale_add"));
}

TEST_CASE("a bundle's GPU code is registered with its launch rule",
          "[kernels][bundle]") {
  temp_dir dir;
  auto key = new_key();
  auto b = dir.file("acme");
  auto text = test::acme_kernels_text("bt8");
  text.replace(text.find("  cpu_symbol: \"acme_histogram\""), 0,
               "  cuda { blob: \"gpu/k.ptx\" function: \"hist\" block: 128 "
               "threads: \"ceil_div(bytes, 4)\" }\n");
  test::make_bundle(b, "acme", text, nullptr);
  // A PTX blob for it, listed and signed (the driver's JIT, not the
  // loader, judges PTX: tests/devices/gpu_device_test.cpp).
  auto ptx = std::string{".version 8.0\n"};
  test::add_blob(b, "gpu/k.ptx", ptx, "CUDA_PTX");
  sign_raw(b, key);
  auto got = loaded_of(test::load_here(b, trusting(key), false));
  auto id = got.kernels[1].second;
  CHECK(has_gpu_code(id, true));
  CHECK_FALSE(has_gpu_code(id, false));
  CHECK_FALSE(has_gpu_code(got.kernels[0].second, true));
  auto& cuda = find(id)->cuda;
  CHECK(cuda.kind == gpu_code::format::ptx);
  CHECK(cuda.function == "hist");
  CHECK(cuda.block == 128);
  // The image is the blob's bytes and the NUL the driver reads PTX up to.
  REQUIRE(cuda.image->size() == ptx.size() + 1);
  CHECK(cuda.image->back() == 0);
  std::vector<uint64_t> lens{10};
  CHECK(cuda.launch_elements({}, input_lengths{lens}) == 3);
}

TEST_CASE("a bundle whose kernel names are taken is refused whole",
          "[kernels][bundle]") {
  temp_dir dir;
  auto key = new_key();
  test::make_bundle(dir.file("one"), "one", test::acme_kernels_text("bt5"),
                    &key);
  loaded_of(test::load_here(dir.file("one"), trusting(key)));
  // Another bundle (another manifest) with a kernel of the same name, and
  // one new kernel: neither registers.
  auto text = test::acme_kernels_text("bt5");
  text.replace(text.find("bt5.histogram"), 13, "bt5.histogran");
  test::make_bundle(dir.file("two"), "two", text, &key);
  auto r = refusal_of(test::load_here(dir.file("two"), trusting(key)));
  CHECK(r.reason == refusal::conflict);
  CHECK_THAT(r.detail, Catch::Contains("'bt5.scale_add' is already "
                                       "registered (bundle one 1.0.0"));
  CHECK_FALSE(parse_kernel("bt5.histogran"));
  // A built-in name.
  text = test::acme_kernels_text("bt5x");
  text.replace(text.find("bt5x.scale_add"), 14, "axpy");
  test::make_bundle(dir.file("three"), "three", text, &key);
  CHECK(refusal_of(test::load_here(dir.file("three"), trusting(key))).reason ==
        refusal::conflict);
}

TEST_CASE("malformed manifests are refused with what is wrong",
          "[kernels][bundle]") {
  auto base = [](std::string kernels) {
    return "name: \"m\"\nversion: \"1\"\nblob { path: \"lib.so\" sha256: \"" +
           std::string(64, 'a') + "\" size: 10 kind: CPU_SHARED_OBJECT }\n" +
           kernels;
  };
  auto k = [](std::string body) {
    return "kernel { name: \"mk.k\" " + body + " }";
  };
  std::string ok_body = "input { name: \"x\" dtype: \"f32\" } output { dtype: "
                        "\"f32\" } output_size: \"x\" cpu_blob: \"lib.so\" "
                        "cpu_symbol: \"f\"";
  auto error = [&](const std::string& text) {
    auto r = parse_manifest(text);
    REQUIRE(std::holds_alternative<refused>(r));
    CHECK(std::get<refused>(r).reason == refusal::malformed);
    return std::get<refused>(r).detail;
  };
  CHECK(std::holds_alternative<pb::KernelBundle>(
      parse_manifest(base(k(ok_body)))));
  CHECK_THAT(error("name: 3"), Catch::Contains("line 1"));
  CHECK_THAT(error("nonsense { }"), Catch::Contains("nonsense"));
  CHECK_THAT(error(base("")), Catch::Contains("0 kernels"));
  auto no_blob = base(k(ok_body));
  no_blob.erase(no_blob.find("blob {"),
                no_blob.find("}\n") + 2 - no_blob.find("blob {"));
  CHECK_THAT(error(no_blob), Catch::Contains("0 blobs"));
  auto with = [&](std::string from, std::string to) {
    auto t = base(k(ok_body));
    t.replace(t.find(from), from.size(), to);
    return error(t);
  };
  CHECK_THAT(with("name: \"m\"", "name: \"Bad\""),
             Catch::Contains("name 'Bad'"));
  CHECK_THAT(with("version: \"1\"", "version: \"\""),
             Catch::Contains("version"));
  CHECK_THAT(with("lib.so\" sha", "/etc/lib.so\" sha"),
             Catch::Contains("not a valid path"));
  CHECK_THAT(with(std::string(64, 'a'), "abc"), Catch::Contains("sha256"));
  CHECK_THAT(with("size: 10", "size: 0"), Catch::Contains("size 0"));
  CHECK_THAT(with(" kind: CPU_SHARED_OBJECT", ""),
             Catch::Contains("needs a kind"));
  CHECK_THAT(with("dtype: \"f32\" } output", "dtype: \"f16\" } output"),
             Catch::Contains("'f16'"));
  CHECK_THAT(with("output_size: \"x\"", "output_size: \"x * y\""),
             Catch::Contains("unknown name 'y'"));
  CHECK_THAT(with("output_size: \"x\"", ""), Catch::Contains("output_size"));
  CHECK_THAT(with("name: \"x\"", "name: \"m\""),
             Catch::Contains("taken by a scalar"));
  CHECK_THAT(with("cpu_symbol: \"f\"", "cpu_symbol: \"f g\""),
             Catch::Contains("not a C identifier"));
  CHECK_THAT(with("cpu_blob: \"lib.so\"", "cpu_blob: \"other.so\""),
             Catch::Contains("not a CPU_SHARED_OBJECT blob"));
  CHECK_THAT(
      with("cpu_symbol: \"f\"",
           "cpu_symbol: \"f\" cuda { blob: \"lib.so\" function: \"g\" }"),
      Catch::Contains("not a CUDA_PTX, CUDA_CUBIN or CUDA_FATBIN"));
  CHECK_THAT(error(base(k(ok_body) + k(ok_body))),
             Catch::Contains("defined twice"));
}

TEST_CASE("a manifest larger than the limit is not read", "[kernels][bundle]") {
  temp_dir dir;
  std::filesystem::create_directories(dir.file("big"));
  test::write_bytes(dir.file("big") + "/manifest.textproto",
                    std::string(max_manifest_bytes + 1, '#'));
  auto r = read_manifest(dir.file("big"));
  REQUIRE(std::holds_alternative<refused>(r));
  CHECK(std::get<refused>(r).reason == refusal::unreadable);
  CHECK_THAT(std::get<refused>(r).detail, Catch::Contains("more than"));
}

TEST_CASE("a runtime loads its config's bundles and audits, counts and "
          "alerts a refusal",
          "[kernels][bundle][actors]") {
  test::actor_fixture f;
  auto key = new_key();
  auto good = f.dir.file("good");
  auto bad = f.dir.file("bad");
  test::make_bundle(good, "good", test::acme_kernels_text("bt6"), &key);
  test::make_bundle(bad, "bad", test::acme_kernels_text("bt7"), &key);
  auto so = test::read_bytes(bad + "/cpu/libacme.so");
  so[1000] ^= 0x40;
  test::write_bytes(bad + "/cpu/libacme.so", so);
  auto cfg = test::make_config(f.dir, 1, {{"sim0", 1.0}});
  auto* kb = cfg.mutable_kernel_bundles();
  kb->add_trusted_key(test::write_public_key(f.dir, key));
  kb->add_load(good);
  kb->add_load(bad);
  cfg.mutable_alerts()->set_eval_interval_ms(20);
  // A grant may name a bundle's kernel: the bundles load first.
  cfg.mutable_tenant(0)->clear_kernels();
  cfg.mutable_tenant(0)->add_kernels("bt6.scale_add");
  auto rt = actors::runtime::start(f.sys, cfg);
  REQUIRE(rt);
  auto counts = (*rt)->kernel_bundles();
  CHECK(counts.loaded == 1);
  CHECK(counts.refused ==
        std::map<std::string, uint64_t>{{"tampered_blob", 1}});
  // Refused at start and not loaded since: what the alert rule reads.
  CHECK(counts.refused_now ==
        std::map<std::string, uint64_t>{{"tampered_blob", 1}});
  // The good bundle's kernel runs on the CPU worker and the simulated GPU.
  auto id = parse_kernel("bt6.scale_add");
  REQUIRE(id);
  std::set<std::string> devices;
  for (uint64_t i = 1; i <= 16; ++i) {
    work_item item;
    item.id = i;
    item.tenant = "t";
    item.kernel = *id;
    item.args.alpha = 3;
    item.inputs.push_back(host_buffer{std::vector<double>{1, 2}});
    item.inputs.push_back(host_buffer{std::vector<double>{10, 20}});
    auto r = (*rt)->run(std::move(item));
    REQUIRE(r);
    REQUIRE(r->output.type == dtype::f64);
    CHECK(r->output.as<double>()[1] == 26);
    devices.insert(r->device);
  }
  CHECK(devices.count("cpu0") + devices.count("sim0") >= 1);
  // The refusal fires kernel_bundle_refused for the bad bundle's directory.
  auto firing = [&] {
    auto a = (*rt)->alerts();
    REQUIRE(a);
    for (auto& x : *a)
      if (x.name == "kernel_bundle_refused" && x.subject == bad)
        return x.detail;
    return std::string{};
  };
  for (int i = 0; i < 200 && firing().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_THAT(firing(), Catch::Contains("tampered_blob: blob 'cpu/libacme.so'"));
  // Through the API: refused again, with the reason in the error.
  auto again = (*rt)->load_kernel_bundle(bad);
  REQUIRE_FALSE(again);
  CHECK(code_of(again.error()) == errc::bundle_refused);
  CHECK_THAT(describe(again.error()), Catch::Contains("tampered_blob"));
  CHECK((*rt)->kernel_bundles().refused["tampered_blob"] == 2);
  // Fixed: it loads, and the alert resolves.
  test::make_bundle(bad, "bad", test::acme_kernels_text("bt7"), &key);
  auto names = (*rt)->load_kernel_bundle(bad);
  REQUIRE(names);
  CHECK(names->at(0) == "bt7.scale_add");
  CHECK((*rt)->kernel_bundles().refused_now.empty());
  for (int i = 0; i < 200 && !firing().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(firing().empty());
  (*rt)->stop();
  // Each outcome is in the audit log.
  std::vector<std::string> details;
  for (auto& rec : test::read_audit(cfg.audit_path()))
    if (rec.kind() == pb::KERNEL_BUNDLE)
      details.push_back(rec.detail());
  REQUIRE(details.size() == 4);
  CHECK_THAT(details[0], Catch::StartsWith("loaded good 1.0.0 from " + good));
  CHECK_THAT(details[0], Catch::Contains("bt6.scale_add, bt6.histogram"));
  CHECK_THAT(details[1], Catch::StartsWith("refused (tampered_blob): "));
  CHECK_THAT(details[2], Catch::StartsWith("refused (tampered_blob): "));
  CHECK_THAT(details[3], Catch::StartsWith("loaded bad 1.0.0"));
}

TEST_CASE("a config's trust settings are checked when it is compiled",
          "[kernels][bundle]") {
  temp_dir dir;
  pb::KernelBundles kb;
  kb.add_trusted_key(dir.file("missing.pub"));
  auto t = trust_from_config(kb);
  REQUIRE_FALSE(t);
  CHECK_THAT(describe(t.error()), Catch::Contains("cannot open"));
  test::write_bytes(dir.file("junk.pub"), "not a key");
  kb.set_trusted_key(0, dir.file("junk.pub"));
  t = trust_from_config(kb);
  REQUIRE_FALSE(t);
  CHECK_THAT(describe(t.error()), Catch::Contains("not an Ed25519 public key"));
  kb.clear_trusted_key();
  kb.add_revoked_key("xyz");
  t = trust_from_config(kb);
  REQUIRE_FALSE(t);
  CHECK_THAT(describe(t.error()), Catch::Contains("16 hex digits"));
  kb.clear_revoked_key();
  kb.add_revoked_bundle("00");
  t = trust_from_config(kb);
  REQUIRE_FALSE(t);
  CHECK_THAT(describe(t.error()), Catch::Contains("64 hex digits"));
}
