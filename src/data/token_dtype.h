#pragma once
// The width of a token file's ids. Torch-free: the configuration names it too.
#include "core/name_table.h"

namespace bigbatch {

// --token-dtype (tokens:PATH, data/token_files.h): auto (the file's header says; headerless
// files need one of the others).
enum class TokenDtype { Auto, Uint16, Uint32 };
const NameTable<TokenDtype>& token_dtype_names();
inline const char* to_string(TokenDtype dtype) {
  return token_dtype_names().name(dtype);
}

}  // namespace bigbatch
