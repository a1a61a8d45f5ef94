#include "data/text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/files.h"

namespace bigbatch {

namespace fs = std::filesystem;

namespace {

bool only_whitespace(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  });
}

// The line without its line ending ("\n" or "\r\n").
std::string_view bare(std::string_view line) {
  if (!line.empty() && line.back() == '\n')
    line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  return line;
}

void append_document(std::vector<std::string>& documents, std::string_view text) {
  if (!only_whitespace(text))
    documents.emplace_back(text);
}

}  // namespace

std::vector<std::string> split_documents(std::string_view text, const std::string& separator,
                                         int64_t* separator_lines) {
  std::vector<std::string> documents;
  int64_t separators = 0;
  const bool each_line = separator == "line";
  const bool blank = separator == "blank";
  size_t document_begin = 0;
  size_t position = 0;
  while (position < text.size()) {
    size_t end = text.find('\n', position);
    end = end == std::string_view::npos ? text.size() : end + 1;
    const std::string_view line = text.substr(position, end - position);
    if (each_line) {
      append_document(documents, bare(line));
      document_begin = end;
    } else if (blank ? only_whitespace(line) : bare(line) == separator) {
      ++separators;
      append_document(documents, text.substr(document_begin, position - document_begin));
      document_begin = end;
    }
    position = end;
  }
  if (document_begin < text.size())
    append_document(documents, text.substr(document_begin));
  if (separator_lines)
    *separator_lines = separators;
  return documents;
}

TextCorpus read_text_corpus(const std::string& path, const std::string& separator) {
  std::error_code error;
  const auto status = fs::status(path, error);
  if (error || !fs::exists(status)) {
    throw Error(ErrorKind::Data, "text corpus '" + path + "' does not exist",
                path.find("fortunes") != std::string::npos
                    ? "install it with: apt-get install fortunes"
                    : "point --dataset text:PATH at a text file or a directory of them");
  }
  std::vector<fs::path> files;
  if (fs::is_directory(status)) {
    for (const auto& entry : fs::directory_iterator(path, error))
      files.push_back(entry.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  TextCorpus corpus;
  std::set<fs::path> seen;
  int64_t separators_seen = 0;
  for (const auto& file : files) {
    if (!fs::is_regular_file(file, error))
      continue;  // subdirectories, sockets, broken links
    const fs::path canonical = fs::canonical(file, error);
    if (error || !seen.insert(canonical).second) {
      ++corpus.skipped_files;  // a link to a file already read (fortune's .u8 names)
      continue;
    }
    const std::string text = read_text_file(file.string());
    if (text.find('\0') != std::string::npos) {
      ++corpus.skipped_files;  // binary: fortune's strfile indexes (.dat)
      continue;
    }
    ++corpus.files;
    int64_t separators = 0;
    auto documents = split_documents(text, separator, &separators);
    separators_seen += separators;
    for (auto& document : documents) {
      corpus.bytes += static_cast<int64_t>(document.size());
      corpus.documents.push_back(std::move(document));
    }
  }
  if (corpus.files == 0) {
    throw Error(ErrorKind::Data, "text corpus '" + path + "' holds no text files",
                "point --dataset text:PATH at a text file or a directory of them");
  }
  if (corpus.documents.empty()) {
    throw Error(ErrorKind::Data, "text corpus '" + path + "' holds no text (only whitespace)",
                "use a corpus with text in it");
  }
  if (separators_seen == 0 && separator != "line" && corpus.files == 1) {
    throw Error(ErrorKind::Data,
                "text corpus '" + path + "' never has a separator line '" + separator +
                    "': it would be one document of " + std::to_string(corpus.bytes) + " bytes",
                "give the corpus's separator with --doc-separator LINE, or --doc-separator blank "
                "or line");
  }
  return corpus;
}

TextCorpus read_jsonl_corpus(const std::string& path, const std::string& field) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    throw Error(ErrorKind::Data, "JSONL corpus '" + path + "' is not a file",
                "point --dataset jsonl:FILE at a file with one JSON object per line");
  }
  TextCorpus corpus = parse_jsonl_corpus(read_text_file(path), field, path);
  corpus.files = 1;
  return corpus;
}

namespace {

// A line the JSON parser refused, said in its words: what is wrong, and at which byte. Its
// "last read" is left out (it may hold the very bytes that are not text).
[[noreturn]] void throw_unreadable_line(const std::string& where,
                                        const nlohmann::json::exception& e,
                                        const std::string& field) {
  std::string reason = e.what();
  if (const size_t dash = reason.find(" - "); dash != std::string::npos)
    reason = reason.substr(dash + 3);  // after "syntax error while parsing value"
  else if (const size_t bracket = reason.find("] "); bracket != std::string::npos)
    reason = reason.substr(bracket + 2);  // "number overflow parsing '1e999'"
  if (const size_t last = reason.find("; last read"); last != std::string::npos)
    reason.resize(last);
  const auto* parse = dynamic_cast<const nlohmann::json::parse_error*>(&e);
  const std::string at = parse ? " at byte " + std::to_string(parse->byte) : "";
  const bool utf8 = reason.find("UTF-8") != std::string::npos;
  const bool surrogate = reason.find("surrogate") != std::string::npos;
  throw Error(ErrorKind::Data, where + " is not valid JSON" + at + ": " + reason,
              utf8        ? "save the file as UTF-8 (e.g. iconv -f LATIN1 -t UTF-8)"
              : surrogate ? "a lone surrogate escape (\\ud800 without its pair) is no "
                            "character: write the text with a JSON library from its strings"
                          : "write one object per line, e.g. {\"" + field + "\": \"...\"}");
}

}  // namespace

TextCorpus parse_jsonl_corpus(std::string_view text, const std::string& field,
                              const std::string& path) {
  TextCorpus corpus;
  int64_t line_number = 0;
  size_t position = 0;
  while (position < text.size()) {
    size_t end = text.find('\n', position);
    end = end == std::string_view::npos ? text.size() : end;
    const std::string_view line = text.substr(position, end - position);
    position = end + 1;
    ++line_number;
    if (only_whitespace(line))
      continue;
    const std::string where = "line " + std::to_string(line_number) + " of '" + path + "'";
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw_unreadable_line(where, e, field);
    }
    if (!record.is_object()) {
      throw Error(ErrorKind::Data,
                  where + " is not a JSON object (it is " +
                      (record.is_null()
                           ? std::string("null")
                           : (record.is_array() ? "an " : "a ") + std::string(record.type_name())) +
                      ")",
                  "write one object per line, e.g. {\"" + field + "\": \"...\"}");
    }
    const auto found = record.find(field);
    if (found == record.end()) {
      throw Error(ErrorKind::Data, where + " has no field \"" + field + "\"",
                  "name the document's field with --text-field");
    }
    if (!found->is_string()) {
      throw Error(ErrorKind::Data, where + ": field \"" + field + "\" is not a string",
                  "the document must be a JSON string");
    }
    std::string document = found->get<std::string>();
    if (only_whitespace(document))
      continue;
    corpus.bytes += static_cast<int64_t>(document.size());
    corpus.documents.push_back(std::move(document));
  }
  if (corpus.documents.empty()) {
    throw Error(ErrorKind::Data, "JSONL corpus '" + path + "' holds no documents",
                "use a file with one {\"" + field + "\": \"...\"} object per line");
  }
  return corpus;
}

TokenRows document_rows(const std::vector<std::string>& documents, int64_t seq_len) {
  return document_rows(tokenize_documents(documents, byte_tokenizer(), /*packed=*/false, "text"),
                       seq_len, kEndOfText);
}

TokenRows packed_rows(const std::vector<std::string>& documents, int64_t seq_len) {
  return packed_rows(tokenize_documents(documents, byte_tokenizer(), /*packed=*/true, "text"),
                     seq_len, kEndOfText);
}

}  // namespace bigbatch
