#include "apps/common/jsonl.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "tensor/error.h"

namespace kiln::apps {

void start_jsonl(const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  KILN_CHECK(out.good(), "--log '", path, "': cannot create (", std::strerror(errno), ")");
}

void append_jsonl(const std::string& path, const std::string& json_object) {
  KILN_CHECK(json_object.find('\n') == std::string::npos, "--log '", path,
             "': a record must be one line, got one with a newline: ", json_object);
  std::ofstream out(path, std::ios::app);
  KILN_CHECK(out.good(), "--log '", path, "': cannot open for appending (", std::strerror(errno), ")");
  out << json_object << '\n' << std::flush;
  KILN_CHECK(out.good(), "--log '", path, "': write failed (", std::strerror(errno), ")");
}

}  // namespace kiln::apps
