#include "tools/jobs_command.hpp"

#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "messages/admin.pb.h"
#include "messages/errc.hpp"
#include "tools/admin_client.hpp"
#include "tools/admin_command.hpp"
#include "tools/strict_numbers.hpp"
#include "tools/terminal_text.hpp"

namespace cohort::tools {

namespace {

int jobs_bad_input(const std::string& msg) {
  std::fprintf(stderr, "cohort jobs: %s (see `cohort jobs --help`)\n",
               terminal_text(msg).c_str());
  return exit_bad_input;
}

std::string age_text(double ms) {
  char buf[32];
  if (ms < 10'000)
    std::snprintf(buf, sizeof buf, "%.0fms", ms);
  else if (ms < 600'000)
    std::snprintf(buf, sizeof buf, "%.1fs", ms / 1000);
  else
    std::snprintf(buf, sizeof buf, "%.0fm", ms / 60'000);
  return buf;
}

// What the node answered, or (printed) why there is nothing.
std::optional<std::string> call(const std::string& url, const char* method,
                                const std::string& path,
                                const std::string& token) {
  return admin_body("cohort jobs", url, method, path, token);
}

int list(const jobs_cli& c, const std::string& url) {
  auto path = c.tenant.empty() ? std::string{"/v1/items"}
                               : "/v1/tenants/" + c.tenant + "/items";
  auto body = call(url, "GET", path, "");
  if (!body)
    return exit_failed;
  if (c.json) {
    std::fputs(body->c_str(), stdout);
    return exit_ok;
  }
  pb::ItemList items;
  if (!parse_answer(*body, items)) {
    std::fprintf(stderr,
                 "cohort jobs: %s answered something that is not an "
                 "item list\n",
                 url.c_str());
    return exit_failed;
  }
  std::printf("%-8s %-10s %-14s %-22s %-9s %-10s %8s %4s %5s  %s\n", "JOB",
              "ID", "TENANT", "KERNEL", "STATE", "DEVICE", "AGE", "TRY", "PRIO",
              "DETAIL");
  std::map<std::string, int> by_state;
  for (auto& i : items.items()) {
    ++by_state[i.state()];
    std::printf("%-8llu %-10llu %-14s %-22s %-9s %-10s %8s %4u %5d  %s%s\n",
                (unsigned long long)i.job(), (unsigned long long)i.id(),
                terminal_text(i.tenant()).c_str(),
                terminal_text(i.kernel()).c_str(),
                terminal_text(i.state()).c_str(),
                i.device().empty() ? "-" : terminal_text(i.device()).c_str(),
                age_text(i.age_ms()).c_str(), i.attempts(), i.priority(),
                i.cancelling() ? "(cancelling) " : "",
                terminal_text(i.detail()).c_str());
  }
  std::printf("%d live item%s", items.items_size(),
              items.items_size() == 1 ? "" : "s");
  const char* sep = ": ";
  for (auto& [state, n] : by_state) {
    std::printf("%s%d %s", sep, n, terminal_text(state).c_str());
    sep = ", ";
  }
  std::printf("\n");
  return exit_ok;
}

int describe_job(const jobs_cli& c, const std::string& url) {
  auto job = parse_id("JOB", c.job);
  if (!job)
    return jobs_bad_input(describe(job.error()));
  auto body = call(url, "GET", "/v1/items/" + std::to_string(*job), "");
  if (!body)
    return exit_failed;
  if (c.json) {
    std::fputs(body->c_str(), stdout);
    return exit_ok;
  }
  pb::ItemView i;
  if (!parse_answer(*body, i)) {
    std::fprintf(stderr,
                 "cohort jobs: %s answered something that is not an "
                 "item\n",
                 url.c_str());
    return exit_failed;
  }
  std::printf("job        %llu\n", (unsigned long long)i.job());
  std::printf("id         %llu (client %llu)\n", (unsigned long long)i.id(),
              (unsigned long long)i.client());
  std::printf("tenant     %s\n", terminal_text(i.tenant()).c_str());
  std::printf("kernel     %s\n", terminal_text(i.kernel()).c_str());
  std::printf("state      %s%s\n", terminal_text(i.state()).c_str(),
              i.cancelling() ? " (cancelling: it ends when its launch does)"
                             : "");
  std::printf("device     %s\n",
              i.device().empty() ? "-" : terminal_text(i.device()).c_str());
  std::printf("age        %s\n", age_text(i.age_ms()).c_str());
  std::printf("placements %u\n", i.attempts());
  std::printf("priority   %d\n", i.priority());
  if (!i.detail().empty())
    std::printf("detail     %s\n", terminal_text(i.detail()).c_str());
  return exit_ok;
}

int cancel(const jobs_cli& c, const std::string& url) {
  int given = !c.job.empty() + !c.tenant.empty() + !c.client.empty();
  if (given != 1)
    return jobs_bad_input(
        "cancel takes one of JOB, --tenant NAME or --client N");
  std::string path;
  if (!c.job.empty()) {
    auto job = parse_id("JOB", c.job);
    if (!job)
      return jobs_bad_input(describe(job.error()));
    path = "/v1/items/" + std::to_string(*job) + "/cancel";
  } else if (!c.client.empty()) {
    auto client = parse_id("--client", c.client);
    if (!client)
      return jobs_bad_input(describe(client.error()));
    path = "/v1/clients/" + std::to_string(*client) + "/cancel";
  } else {
    path = "/v1/tenants/" + c.tenant + "/cancel";
  }
  auto token = admin_token(c.token_file);
  if (!token)
    return jobs_bad_input(describe(token.error()));
  auto body = call(url, "POST", path, *token);
  if (!body)
    return exit_failed;
  pb::CancelReply reply;
  if (!parse_answer(*body, reply)) {
    std::fputs(body->c_str(), stdout);
    return exit_ok;
  }
  std::printf("%s\n", terminal_text(reply.message()).c_str());
  return exit_ok;
}

} // namespace

int cmd_jobs(const jobs_cli& c) {
  auto url = node_url(c.url);
  if (parsed(c.list))
    return list(c, url);
  if (parsed(c.describe))
    return describe_job(c, url);
  return cancel(c, url);
}

} // namespace cohort::tools
