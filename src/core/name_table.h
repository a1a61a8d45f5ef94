#pragma once
// One table of names per enum: the only place an enum value meets its text. Parsing (with
// "did you mean"), printing, the list of choices that help and errors show, and the checkpoint
// and config.toml spellings all read it, so a new value is one row.
//
//   inline const NameTable<Shuffle> kShuffleNames{
//       "--shuffle", "--shuffle", {{Shuffle::On, "on"}, {Shuffle::Off, "off"}}};
//   Shuffle s = kShuffleNames.parse("of");   // error: ... did you mean 'off'? use --shuffle on or
//   off const char* text = kShuffleNames.name(s);
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

template <typename Enum>
class NameTable {
 public:
  // `subject` opens the error ("optimizer 'lion' is not known"); `flag` introduces the choices
  // in its hint ("use --optimizer sgd, adamw, lars or lamb"). Rows in the order help lists them.
  NameTable(std::string subject, std::string flag,
            std::initializer_list<std::pair<Enum, const char*>> rows)
      : subject_(std::move(subject)), flag_(std::move(flag)), rows_(rows) {}

  const char* name(Enum value) const {
    for (const auto& [v, n] : rows_) {
      if (v == value)
        return n;
    }
    BB_INTERNAL_ASSERT(false, "an enum value without a name in the table of " + subject_);
    return "";
  }

  Enum parse(const std::string& text) const {
    for (const auto& [v, n] : rows_) {
      if (text == n)
        return v;
    }
    const auto guess = closest_match(text, names());
    throw Error(ErrorKind::Config, subject_ + " '" + text + "' is not known",
                (guess ? "did you mean '" + *guess + "'? " : std::string()) + "use " + flag_ + " " +
                    choices());
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& row : rows_)
      out.emplace_back(row.second);
    return out;
  }

  // "a, b or c"
  std::string choices() const {
    std::string text;
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (i > 0)
        text += i + 1 == rows_.size() ? " or " : ", ";
      text += rows_[i].second;
    }
    return text;
  }

  const std::vector<std::pair<Enum, const char*>>& rows() const { return rows_; }

 private:
  std::string subject_;
  std::string flag_;
  std::vector<std::pair<Enum, const char*>> rows_;
};

}  // namespace bigbatch
