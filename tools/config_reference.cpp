// config_reference: writes docs/config.md, the reference of every field of
// a runtime config (cohort.pb.RuntimeConfig), from messages/cohort.proto
// itself: protoc's descriptor set of it with its comments
// (--include_source_info), read here through protobuf's own descriptors.
// The docs test compares docs/config.md with what this prints, so the
// reference cannot drift from the proto.
//
//   config_reference DESCRIPTOR_SET > docs/config.md
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

namespace {

namespace gp = google::protobuf;

// A comment as one paragraph: lines joined, blanks trimmed, pipes escaped
// for the table.
std::string paragraph(const std::string& comment) {
  std::string out;
  std::istringstream in{comment};
  std::string line;
  while (std::getline(in, line)) {
    auto b = line.find_first_not_of(' ');
    if (b == std::string::npos)
      continue;
    line = line.substr(b);
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    if (!out.empty())
      out += ' ';
    out += line;
  }
  std::string escaped;
  for (char c : out) {
    if (c == '|')
      escaped += "\\|";
    else
      escaped += c;
  }
  return escaped;
}

// A heading for a message or enum (its name inside the package, so that
// nested ones are told apart) and the anchor GitHub gives it.
std::string heading_of(const std::string& full_name) {
  const std::string package = "cohort.pb.";
  return full_name.rfind(package, 0) == 0 ? full_name.substr(package.size())
                                          : full_name;
}

std::string anchor_of(const std::string& full_name) {
  std::string a;
  for (char c : heading_of(full_name))
    if (c != '.')
      a += char(std::tolower(static_cast<unsigned char>(c)));
  return a;
}

template <class D> std::string comment_of(const D* d) {
  gp::SourceLocation loc;
  if (!d->GetSourceLocation(&loc))
    return {};
  return paragraph(loc.leading_comments + loc.trailing_comments);
}

std::string type_of(const gp::FieldDescriptor* f) {
  if (f->is_map()) {
    auto* entry = f->message_type();
    return "map<" + type_of(entry->field(0)) + ", " +
           type_of(entry->field(1)) + ">";
  }
  std::string t;
  if (f->message_type() != nullptr) {
    std::string n{f->message_type()->full_name()};
    t = "[" + heading_of(n) + "](#" + anchor_of(n) + ")";
  } else if (f->enum_type() != nullptr) {
    std::string n{f->enum_type()->full_name()};
    t = "[" + heading_of(n) + "](#" + anchor_of(n) + ")";
  } else {
    t = f->type_name();
  }
  if (f->is_repeated())
    return "repeated " + t;
  if (f->has_optional_keyword())
    return "optional " + t;
  return t;
}

// What an unset field is.
std::string unset_of(const gp::FieldDescriptor* f) {
  if (f->is_repeated())
    return "none";
  if (f->has_optional_keyword())
    return "unset";
  if (f->message_type() != nullptr)
    return "unset";
  if (f->enum_type() != nullptr)
    return "`" + std::string{f->enum_type()->value(0)->name()} + "`";
  switch (f->cpp_type()) {
  case gp::FieldDescriptor::CPPTYPE_STRING:
    return "\"\"";
  case gp::FieldDescriptor::CPPTYPE_BOOL:
    return "false";
  default:
    return "0";
  }
}

void enum_table(std::FILE* out, const gp::EnumDescriptor* e) {
  std::fprintf(out, "\n### %s\n\n",
               heading_of(std::string{e->full_name()}).c_str());
  if (auto c = comment_of(e); !c.empty())
    std::fprintf(out, "%s\n\n", c.c_str());
  std::fprintf(out, "| value | meaning |\n|---|---|\n");
  for (int i = 0; i < e->value_count(); ++i) {
    auto* v = e->value(i);
    std::fprintf(out, "| `%s` | %s |\n", std::string{v->name()}.c_str(),
                 comment_of(v).c_str());
  }
}

void message_table(std::FILE* out, const gp::Descriptor* m,
                   std::vector<const gp::Descriptor*>& next,
                   std::vector<const gp::EnumDescriptor*>& enums,
                   std::set<std::string>& seen) {
  std::fprintf(out, "\n## %s\n\n",
               heading_of(std::string{m->full_name()}).c_str());
  if (auto c = comment_of(m); !c.empty())
    std::fprintf(out, "%s\n\n", c.c_str());
  std::fprintf(out, "| field | type | unset | meaning |\n|---|---|---|---|\n");
  for (int i = 0; i < m->field_count(); ++i) {
    auto* f = m->field(i);
    // A section without words of its own says what its message says.
    auto meaning = comment_of(f);
    if (meaning.empty() && f->message_type() != nullptr && !f->is_map())
      meaning = comment_of(f->message_type());
    std::fprintf(out, "| `%s` | %s | %s | %s |\n",
                 std::string{f->name()}.c_str(), type_of(f).c_str(),
                 unset_of(f).c_str(), meaning.c_str());
    const gp::FieldDescriptor* inner = f;
    if (f->is_map())
      inner = f->message_type()->field(1);
    if (auto* sub = inner->message_type();
        sub != nullptr && seen.insert(std::string{sub->full_name()}).second)
      next.push_back(sub);
    if (auto* e = inner->enum_type();
        e != nullptr && seen.insert(std::string{e->full_name()}).second)
      enums.push_back(e);
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: config_reference DESCRIPTOR_SET\n");
    return 2;
  }
  std::ifstream in{argv[1], std::ios::binary};
  gp::FileDescriptorSet set;
  if (!in || !set.ParseFromIstream(&in)) {
    std::fprintf(stderr, "config_reference: cannot read %s\n", argv[1]);
    return 2;
  }
  gp::DescriptorPool pool;
  for (auto& file : set.file())
    if (pool.BuildFile(file) == nullptr) {
      std::fprintf(stderr, "config_reference: %s does not build\n",
                   file.name().c_str());
      return 2;
    }
  auto* root = pool.FindMessageTypeByName("cohort.pb.RuntimeConfig");
  if (root == nullptr) {
    std::fprintf(stderr, "config_reference: no cohort.pb.RuntimeConfig\n");
    return 2;
  }
  auto* out = stdout;
  std::fprintf(
      out,
      "# Config reference\n\n"
      "Every field of a runtime config (`cohort.pb.RuntimeConfig`, in "
      "protobuf's text format: `cohort serve --config FILE`, a pipeline's "
      "`runtime` section, `cohort::options::config_file`), generated from "
      "`messages/cohort.proto` by `tools/config_reference.cpp` (the docs "
      "test fails when this file differs from what it prints: after "
      "changing the proto, run `./dev.sh config-doc`). **unset** is what a "
      "field is when the config does not name it (protobuf's default); "
      "**meaning** says what that value does (\"0: 5000\" — unset means "
      "5000). Every value is checked when the config is used; a value out "
      "of its bounds is `malformed_config` naming it (`docs/cli.md`, "
      "\"Bounds on every input\").\n");
  std::set<std::string> seen{std::string{root->full_name()}};
  std::vector<const gp::Descriptor*> todo{root};
  std::vector<const gp::EnumDescriptor*> enums;
  // Breadth first: each message after the one that names it first.
  for (size_t i = 0; i < todo.size(); ++i) {
    std::vector<const gp::Descriptor*> next;
    message_table(out, todo[i], next, enums, seen);
    todo.insert(todo.end(), next.begin(), next.end());
    for (int j = 0; j < todo[i]->enum_type_count(); ++j)
      if (seen.insert(std::string{todo[i]->enum_type(j)->full_name()}).second)
        enums.push_back(todo[i]->enum_type(j));
  }
  std::fprintf(out, "\n## Enumerations\n");
  for (auto* e : enums)
    enum_table(out, e);
  return 0;
}
