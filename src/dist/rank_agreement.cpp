#include "dist/rank_agreement.h"

#include <map>

#include "core/text.h"

namespace bigbatch {

std::string encode_description(const RankDescription& description) {
  std::string text;
  for (const auto& [key, value] : description)
    text += key + "\t" + value + "\n";
  return text;
}

RankDescription decode_description(const std::string& text) {
  RankDescription out;
  for (const auto& line : split(text, '\n')) {
    const auto tab = line.find('\t');
    if (tab != std::string::npos)
      out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

std::vector<std::string> description_differences(const RankDescription& description,
                                                 const RankDescription& reference) {
  const std::map<std::string, std::string> theirs(reference.begin(), reference.end());
  const std::map<std::string, std::string> ours(description.begin(), description.end());
  std::vector<std::string> out;
  for (const auto& [key, value] : description) {
    const auto found = theirs.find(key);
    if (found == theirs.end())
      out.push_back(key + " = " + value + " here, unset on rank 0");
    else if (found->second != value)
      out.push_back(key + " = " + value + " here, " + found->second + " on rank 0");
  }
  for (const auto& [key, value] : reference) {
    if (ours.find(key) == ours.end())
      out.push_back(key + " unset here, " + value + " on rank 0");
  }
  return out;
}

}  // namespace bigbatch
