#include "tools/http_router.hpp"

#include <stdexcept>

namespace cohort::tools {

namespace {

bool is_param(const std::string& seg) {
  return !seg.empty() && seg.front() == ':';
}

/// Matches `path` against `pattern`; the score counts fixed segments, so the
/// most specific route wins.
bool matches(const std::vector<std::string>& pattern,
             const std::vector<std::string>& path,
             std::vector<std::string>* params, size_t& score) {
  if (pattern.size() != path.size())
    return false;
  score = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (is_param(pattern[i]))
      continue;
    if (pattern[i] != path[i])
      return false;
    ++score;
  }
  if (params != nullptr)
    for (size_t i = 0; i < pattern.size(); ++i)
      if (is_param(pattern[i]))
        params->push_back(path[i]);
  return true;
}

} // namespace

std::vector<std::string> http_router::split(const std::string& path) {
  std::vector<std::string> out;
  auto end = path.find('?');
  if (end == std::string::npos)
    end = path.size();
  size_t i = 0;
  while (i < end) {
    auto j = path.find('/', i);
    if (j == std::string::npos || j > end)
      j = end;
    if (j > i)
      out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

size_t http_router::add(std::string method, std::string pattern) {
  if (method.empty())
    throw std::invalid_argument("http_router: a route needs a method");
  if (pattern.empty() || pattern.front() != '/')
    throw std::invalid_argument("http_router: '" + pattern +
                                "' does not start with '/'");
  auto segs = split(pattern);
  for (auto& s : segs)
    if (s == ":")
      throw std::invalid_argument("http_router: '" + pattern +
                                  "' has a parameter without a name");
  for (size_t i = 0; i < routes_.size(); ++i) {
    if (routes_[i].method != method || segments_[i].size() != segs.size())
      continue;
    bool same = true;
    for (size_t k = 0; k < segs.size() && same; ++k)
      same = (is_param(segs[k]) && is_param(segments_[i][k])) ||
             segs[k] == segments_[i][k];
    if (same)
      throw std::invalid_argument("http_router: " + method + " " + pattern +
                                  " repeats " + routes_[i].pattern);
  }
  routes_.push_back({std::move(method), std::move(pattern)});
  segments_.push_back(std::move(segs));
  return routes_.size() - 1;
}

http_route_match http_router::match(const std::string& method,
                                    const std::string& path) const {
  http_route_match out;
  auto segs = split(path);
  size_t best_score = 0;
  size_t other = 0;
  bool found = false;
  for (size_t i = 0; i < routes_.size(); ++i) {
    size_t score = 0;
    if (!matches(segments_[i], segs, nullptr, score))
      continue;
    if (routes_[i].method != method) {
      if (out.allow.find(routes_[i].method) == std::string::npos) {
        if (out.allow.empty())
          other = i;
        out.allow += (out.allow.empty() ? "" : ", ") + routes_[i].method;
      }
      continue;
    }
    if (!found || score > best_score) {
      found = true;
      best_score = score;
      out.index = i;
    }
  }
  if (found) {
    out.what = http_route_match::outcome::found;
    out.allow.clear();
    matches(segments_[out.index], segs, &out.params, best_score);
  } else if (!out.allow.empty()) {
    out.what = http_route_match::outcome::wrong_method;
    out.index = other;
  }
  return out;
}

} // namespace cohort::tools
