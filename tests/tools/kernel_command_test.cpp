// `cohort kernel keygen|sign|verify|inspect|list`: key files made once and
// never overwritten, bundles signed, inspected and verified as a node would,
// and the registry's kernels listed with their typed signatures.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

#include "kernels/bundle/signing.hpp"
#include "kernels/registry.hpp"
#include "tests/kernels/bundle/bundle_fixture.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tools/kernel_command.hpp"

using namespace cohort;
using namespace cohort::test;

namespace {

cli_result kernel_in_process(const std::vector<std::string>& words) {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* out = ::open_memstream(&buf, &size);
  REQUIRE(out != nullptr);
  cli_result res;
  res.status = tools::run_kernel(words, out);
  std::fclose(out);
  res.output.assign(buf, size);
  std::free(buf);
  return res;
}

using test::slurp;

} // namespace

TEST_CASE("kernel keygen writes a key pair once", "[tools][kernel]") {
  temp_dir dir;
  auto prefix = dir.file("signer");
  auto res = kernel_in_process({"keygen", prefix});
  REQUIRE(res.status == 0);
  auto priv = kernels::bundle::private_key::from_pem(slurp(prefix + ".key"));
  auto pub = kernels::bundle::public_key::from_pem(slurp(prefix + ".pub"));
  REQUIRE(priv);
  REQUIRE(pub);
  CHECK(priv->public_key().raw() == pub->raw());
  CHECK(res.output.find("key " + pub->id()) == 0);
  struct stat st {};
  REQUIRE(::stat((prefix + ".key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // A second keygen to the same place refuses and leaves the keys alone.
  auto again = kernel_in_process({"keygen", prefix});
  CHECK(again.status == tools::exit_bad_input);
  auto still = kernels::bundle::public_key::from_pem(slurp(prefix + ".pub"));
  REQUIRE(still);
  CHECK(still->raw() == pub->raw());
  // An unwritable place is bad input, not a crash.
  CHECK(kernel_in_process({"keygen", "/nonexistent/dir/k"}).status ==
        tools::exit_bad_input);
  CHECK(kernel_in_process({"keygen"}).status == tools::exit_bad_input);
}

TEST_CASE("kernel list prints every kernel with its signature",
          "[tools][kernel]") {
  kernels::kernel_def d;
  d.name = "test.listed";
  d.signature.inputs = {{"points", kernels::dtype::f64},
                        {"ids", kernels::dtype::i32}};
  d.signature.output = {"inside", kernels::dtype::u8};
  d.output_elements = [](const kernels::kernel_args&,
                         kernels::input_lengths in) { return in[1]; };
  d.cpu = [](const kernels::kernel_args&, kernels::typed_inputs) {
    return kernels::kernel_output{};
  };
  std::string why;
  if (!kernels::parse_kernel("test.listed"))
    REQUIRE(kernels::register_kernel(d, why));
  auto res = kernel_in_process({"list"});
  REQUIRE(res.status == 0);
  CHECK(res.output.find("gemm") != std::string::npos);
  CHECK(res.output.find("a:f32, b:f32") != std::string::npos);
  CHECK(res.output.find("points:f64, ids:i32") != std::string::npos);
  CHECK(res.output.find("inside:u8") != std::string::npos);
  auto json = kernel_in_process({"list", "--json"});
  REQUIRE(json.status == 0);
  CHECK(json.output.find("{\"name\":\"axpy\",\"id\":1,\"builtin\":true,"
                         "\"origin\":\"built-in\"") != std::string::npos);
  CHECK(json.output.find("\"name\":\"test.listed\"") != std::string::npos);
  CHECK(json.output.find("\"output\":{\"name\":\"inside\",\"dtype\":\"u8\"}") !=
        std::string::npos);
  size_t lines = 0;
  for (char c : json.output)
    lines += c == '\n';
  CHECK(lines == kernels::registered_kernels().size());
  CHECK(kernel_in_process({"list", "--bogus"}).status == tools::exit_bad_input);
}

namespace {

// `cohort kernel ARGS` run as its own program (loading a bundle registers
// its kernels in the process that loads it).
cli_result kernel_cmd(const std::string& args) {
  return run_command(std::string{COHORT_BINARY} + " kernel " + args);
}

} // namespace

TEST_CASE("kernel sign, inspect and verify a bundle as a node would",
          "[tools][kernel][bundle]") {
  temp_dir dir;
  auto prefix = dir.file("release");
  REQUIRE(kernel_in_process({"keygen", prefix}).status == 0);
  auto key = kernels::bundle::private_key::from_pem(slurp(prefix + ".key"));
  REQUIRE(key);
  auto id = key->public_key().id();
  auto b = dir.file("acme");
  make_bundle(b, "acme", acme_kernels_text("cli"), nullptr);
  auto pub = prefix + ".pub";

  // Unsigned: inspect says so; verify refuses.
  auto ins = kernel_cmd("inspect " + b);
  REQUIRE(ins.status == 0);
  CHECK_THAT(ins.output, Catch::Contains("bundle acme 1.0.0"));
  CHECK_THAT(ins.output, Catch::Contains("signed by unsigned"));
  CHECK_THAT(ins.output, Catch::Contains("cpu/libacme.so"));
  CHECK_THAT(ins.output, Catch::Contains("matches"));
  CHECK_THAT(ins.output, Catch::Contains("cli.scale_add(x:f64, y:f64) -> "
                                         "f64[x]"));
  CHECK_THAT(ins.output, Catch::Contains("require x == y"));
  auto v = kernel_cmd("verify " + b + " --trusted " + pub);
  CHECK(v.status == tools::exit_failed);
  CHECK_THAT(v.output, Catch::Contains("refused (unsigned)"));

  auto signed_ = kernel_cmd("sign " + b + " --key " + prefix + ".key");
  REQUIRE(signed_.status == 0);
  CHECK_THAT(signed_.output, Catch::Contains("with key " + id));
  v = kernel_cmd("verify " + b + " --trusted " + pub);
  INFO(v.output);
  CHECK(v.status == 0);
  CHECK_THAT(v.output, Catch::Contains("verified acme 1.0.0"));
  CHECK_THAT(v.output,
             Catch::Contains("loads in isolation (cpu/libacme.so on cpu)"));
  CHECK_THAT(v.output,
             Catch::Contains("cli.scale_add, cli.histogram, cli.checked_sum"));
  // A shared object whose constructor crashes: verify refuses it, and says
  // where it crashed, without crashing itself.
  auto crash = dir.file("crash");
  make_bundle(crash, "crash", acme_kernels_text("clicrash"), &*key,
              COHORT_UNRULY_CRASH);
  v = kernel_cmd("verify " + crash + " --trusted " + pub);
  CHECK(v.status == tools::exit_failed);
  CHECK_THAT(v.output, Catch::Contains("refused (load_crashed)") &&
                           Catch::Contains("crashed (SIGSEGV) while loading "
                                           "'cpu/libacme.so' on cpu"));
  // JSON: the manifest's digest, the signer.
  ins = kernel_cmd("inspect --json " + b);
  REQUIRE(ins.status == 0);
  CHECK_THAT(ins.output, Catch::Contains("\"signed_by\":\"key " + id + "\""));
  CHECK_THAT(ins.output, Catch::Contains("\"blobs_match\":true"));
  auto sha_at = ins.output.find("\"manifest_sha256\":\"");
  REQUIRE(sha_at != std::string::npos);
  auto sha = ins.output.substr(sha_at + 19, 64);

  // Revoked, by key and by bundle.
  v = kernel_cmd("verify " + b + " --trusted " + pub + " --revoked-key " + id);
  CHECK(v.status == tools::exit_failed);
  CHECK_THAT(v.output, Catch::Contains("refused (revoked_key)"));
  v = kernel_cmd("verify " + b + " --trusted " + pub + " --revoked-bundle " +
                 sha);
  CHECK(v.status == tools::exit_failed);
  CHECK_THAT(v.output, Catch::Contains("refused (revoked_bundle)"));
  // No trust at all.
  v = kernel_cmd("verify " + b);
  CHECK(v.status == tools::exit_failed);
  CHECK_THAT(v.output, Catch::Contains("refused (unknown_key)"));

  // The config's trust and bundles: list shows the bundle's kernels.
  auto cfg = write(dir, "node.textproto",
                   "kernel_bundles { trusted_key: \"" + pub + "\" load: \"" +
                       b + "\" }\n");
  v = kernel_cmd("verify " + b + " --config " + cfg);
  CHECK(v.status == 0);
  auto list = kernel_cmd("list --config " + cfg);
  REQUIRE(list.status == 0);
  CHECK_THAT(list.output, Catch::Contains("cli.histogram"));
  CHECK_THAT(list.output,
             Catch::Contains("bundle acme 1.0.0 (key " + id + ")"));

  // A blob changed after signing: inspect shows how, verify refuses, and
  // sign will not sign it.
  auto so = read_bytes(b + "/cpu/libacme.so");
  so[so.size() / 3] ^= 4;
  write_bytes(b + "/cpu/libacme.so", so);
  ins = kernel_cmd("inspect " + b);
  CHECK(ins.status == 0);
  CHECK_THAT(ins.output, Catch::Contains("blob 'cpu/libacme.so' has SHA-256"));
  v = kernel_cmd("verify " + b + " --config " + cfg);
  CHECK(v.status == tools::exit_failed);
  CHECK_THAT(v.output, Catch::Contains("refused (tampered_blob)"));
  list = kernel_cmd("list --config " + cfg);
  CHECK(list.status == 0);
  CHECK_THAT(list.output, Catch::Contains("refused (tampered_blob)"));
  CHECK_THAT(list.output, !Catch::Contains("cli.histogram"));
  auto resign = kernel_cmd("sign " + b + " --key " + prefix + ".key");
  CHECK(resign.status == tools::exit_bad_input);
  CHECK_THAT(resign.output, Catch::Contains("not signed (tampered_blob)"));

  // Bad input: no manifest, a public key given as the signing key.
  CHECK(kernel_cmd("inspect " + dir.file("nowhere")).status ==
        tools::exit_bad_input);
  CHECK(kernel_cmd("sign " + b + " --key " + pub).status ==
        tools::exit_bad_input);
  CHECK(
      kernel_cmd("verify " + b + " --trusted " + dir.file("none.pub")).status ==
      tools::exit_bad_input);
}
