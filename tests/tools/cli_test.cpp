// The command line on CLI11: --help on every command, usage errors, strict
// sizes and numbers, and the bash completion script.
#include <catch2/catch.hpp>

#include "tests/tools/cli_fixture.hpp"

using namespace cohort;
using test::cohort_cli;

TEST_CASE("every command and subcommand answers --help", "[tools][cli]") {
  auto top = cohort_cli("--help");
  CHECK(top.status == 0);
  for (auto cmd : {"devices", "run", "audit", "quota", "chaos", "simulate",
                   "serve", "admin", "completion", "version"})
    CHECK_THAT(top.output, Catch::Contains(cmd));
  struct expect {
    const char* args;
    const char* option;
  };
  for (auto [args, option] :
       {expect{"devices --help", "--config FILE"},
        expect{"run --help", "--no-progress"},
        expect{"audit --help", "verify"},
        expect{"audit query --help", "--since TIME"},
        expect{"quota --help", "--tenant NAME"},
        expect{"chaos --help", "--soak"},
        expect{"simulate --help", "PLAN"},
        expect{"serve --help", "--http-max-body BYTES"},
        expect{"admin --help", "--token-file FILE"},
        expect{"admin quota --help", "--memory-quota BYTES"},
        expect{"completion --help", "SHELL"}}) {
    auto res = cohort_cli(args);
    INFO(args << "\n" << res.output);
    CHECK(res.status == 0);
    CHECK_THAT(res.output, Catch::Contains(option));
  }
  auto all = cohort_cli("--help-all");
  CHECK(all.status == 0);
  CHECK_THAT(all.output, Catch::Contains("--http-threads"));
  CHECK(cohort_cli("help").status == 0);
}

TEST_CASE("cohort --version names the build and the GPU plugins it finds",
          "[tools][cli]") {
  // The fake CUDA plugin of the tests is found first on COHORT_PLUGIN_PATH;
  // the HIP plugin where this build has one, else "none" and why.
  auto res = test::run_command("COHORT_PLUGIN_PATH=" COHORT_FAKE_PLUGIN_DIR
                               " " COHORT_BINARY " --version");
  INFO(res.output);
  CHECK(res.status == 0);
  CHECK_THAT(res.output, Catch::StartsWith("cohort 0.1.0 (commit "));
  // A commit (hex digits, maybe -dirty) or "unknown" outside git.
  auto open = res.output.find("(commit ") + 8;
  auto commit = res.output.substr(open, res.output.find(')') - open);
  CHECK((commit == "unknown" ||
         (commit.size() >= 12 &&
          commit.find_first_not_of("0123456789abcdef") >= 12)));
  CHECK_THAT(res.output, Catch::Contains("plugin ABI "));
  CHECK_THAT(res.output, Catch::Contains("  CUDA: " COHORT_FAKE_PLUGIN_DIR
                                         "/libcohort-cuda.so\n"));
  CHECK_THAT(res.output, Catch::Contains("  HIP: "));
  // `cohort version` says the same.
  auto sub = test::run_command("COHORT_PLUGIN_PATH=" COHORT_FAKE_PLUGIN_DIR
                               " " COHORT_BINARY " version");
  CHECK(sub.status == 0);
  CHECK(sub.output == res.output);
}

TEST_CASE("cohort devices is quiet about vendors' libraries without their "
          "GPUs",
          "[tools][cli]") {
  // The HIP plugin's ROCm SMI printed "Failed to open drm root directory"
  // and "Exception caught: rsmi_init." in every process on a machine
  // without the amdgpu driver.
  auto res = test::cohort_cli("devices");
  INFO(res.output);
  CHECK(res.status == 0);
  CHECK_THAT(res.output, Catch::Contains("cpu0"));
  CHECK_THAT(res.output, !Catch::Contains("drm root directory") &&
                             !Catch::Contains("rsmi_init") &&
                             !Catch::Contains("Exception caught"));
}

TEST_CASE("usage errors name the command and exit 2", "[tools][cli]") {
  struct expect {
    const char* args;
    const char* says;
  };
  for (auto [args, says] :
       {expect{"", "Usage"},
        expect{"frobnicate", "frobnicate"},
        expect{"quota --bogus", "cohort quota: The following argument was "
                                "not expected: --bogus"},
        expect{"run", "cohort run: PIPELINE is required"},
        expect{"audit", "cohort audit: A subcommand is required"},
        expect{"audit query", "PATH is required"},
        expect{"serve --config", "cohort serve: --config"},
        expect{"admin", "cohort admin"},
        expect{"admin drain", "DEVICE is required"},
        expect{"completion zsh", "zsh"}}) {
    auto res = cohort_cli(args);
    INFO(args << "\n" << res.output);
    CHECK(res.status == 2);
    CHECK_THAT(res.output, Catch::Contains(says));
  }
}

TEST_CASE("sizes and numbers on the command line are strict", "[tools][cli]") {
  // Sizes take K, M, G, T or KiB, MiB, GiB, TiB, with a fraction; anything
  // else, or too much, is refused before the node starts.
  for (auto bad : {"12XB", "1.5.2", "-1", "1e3", "64 KiB", "2GiB"}) {
    auto res = cohort_cli(std::string{"serve --for 0.001 --http-max-body '"} + bad +
                          "'");
    INFO(bad << "\n" << res.output);
    CHECK(res.status == 2);
    CHECK_THAT(res.output, Catch::Contains("--http-max-body"));
  }
  auto port = cohort_cli("serve --listen 127.0.0.1:99999");
  CHECK(port.status == 2);
  CHECK_THAT(port.output, Catch::Contains("bad port"));
  auto repeat = cohort_cli("serve --repeat 4294967296");
  CHECK(repeat.status == 2);
  CHECK_THAT(repeat.output, Catch::Contains("at most 4294967295"));
  auto quota = cohort_cli("admin --url http://127.0.0.1:1 quota t "
                          "--memory-quota 1.5XB");
  CHECK(quota.status == 2);
  CHECK_THAT(quota.output, Catch::Contains("--memory-quota takes a byte count"));
  auto burst = cohort_cli("admin --url http://127.0.0.1:1 quota t --burst -3");
  CHECK(burst.status == 2);
  // A good size passes parsing (and then finds no node there).
  auto good = cohort_cli("admin --url http://127.0.0.1:1 quota t "
                         "--memory-quota 1.5GiB");
  CHECK(good.status == 1);
  CHECK_THAT(good.output, Catch::Contains("cannot reach"));
}

TEST_CASE("the bash completion script completes commands and options",
          "[tools][cli]") {
  test::temp_dir dir;
  auto script = dir.file("cohort.bash");
  auto gen = test::run_command(std::string{COHORT_BINARY} +
                               " completion bash > " + script);
  REQUIRE(gen.status == 0);
  CHECK(test::run_command("bash -n " + script).status == 0);
  // What bash would offer after `cohort audit q` and `cohort serve --ht`.
  auto ask = [&](const std::string& words) {
    return test::run_command(
        "bash -c 'source " + script + "; COMP_WORDS=(" + words +
        "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _cohort; "
        "printf \"%s\\n\" \"${COMPREPLY[@]}\"'");
  };
  auto audit = ask("cohort audit q");
  CHECK(audit.status == 0);
  CHECK_THAT(audit.output, Catch::Contains("query"));
  auto serve = ask("cohort serve --http-max-c");
  CHECK_THAT(serve.output, Catch::Contains("--http-max-connections"));
  auto top = ask("cohort si");
  CHECK_THAT(top.output, Catch::Contains("simulate"));
  CHECK_THAT(top.output, !Catch::Contains("serve"));
}
