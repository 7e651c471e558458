#include "tools/scheduler_arg.hpp"

#include <google/protobuf/descriptor.h>

#include "messages/convert.hpp"
#include "messages/errc.hpp"

namespace cohort::tools {

caf::error apply_scheduler_arg(pb::RuntimeConfig& cfg, const std::string& arg) {
  auto bad = [](const std::string& what) {
    return make_error(errc::invalid_arguments, "--scheduler: " + what);
  };
  auto* desc = pb::Scheduler::descriptor();
  auto fields = [&] {
    std::string out;
    for (int i = 0; i < desc->field_count(); ++i)
      out += (i > 0 ? ", " : "") + desc->field(i)->name();
    return out;
  };
  if (arg.empty())
    return bad("needs KEY=VALUE settings (" + fields() + ")");
  std::string text;
  for (size_t pos = 0; pos <= arg.size();) {
    auto comma = arg.find(',', pos);
    auto item = arg.substr(pos, comma == std::string::npos ? std::string::npos
                                                           : comma - pos);
    pos = comma == std::string::npos ? arg.size() + 1 : comma + 1;
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      return bad("'" + item + "' is not KEY=VALUE");
    auto key = item.substr(0, eq);
    auto value = item.substr(eq + 1);
    auto* field = desc->FindFieldByName(key);
    if (field == nullptr)
      return bad("unknown setting '" + key + "' (one of " + fields() + ")");
    if (field->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
      if (value.find_first_of("\"\\\n") != std::string::npos)
        return bad("'" + value + "' is not a valid " + key);
      value = "\"" + value + "\"";
    } else if (value.find_first_not_of("0123456789") != std::string::npos) {
      return bad(key + " needs a non-negative integer, got '" + value + "'");
    }
    text += key + ": " + value + "\n";
  }
  pb::Scheduler parsed;
  if (auto err =
          parse_text(text, "--scheduler", parsed, errc::invalid_arguments))
    return err;
  cfg.mutable_scheduler()->MergeFrom(parsed);
  return caf::none;
}

} // namespace cohort::tools
