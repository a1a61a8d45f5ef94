"""Writers of the token-file formats bigbatch reads (tokens:PATH), as their own tools write
them: Megatron-LM's indexed dataset (.bin + .idx, megatron/core/datasets/indexed_dataset.py),
llm.c's shards (dev/data/data_common.py) and headerless files (nanoGPT's prepare.py, numpy's
tofile). Used by the end-to-end tests; numpy only."""
import struct

import numpy as np

MEGATRON_DTYPE_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.uint16: 8}


def write_megatron(prefix, documents, dtype=np.uint16, dtype_code=None):
    """Each document one sequence, laid end to end in PREFIX.bin; PREFIX.idx indexes them."""
    dtype = np.dtype(dtype).type
    with open(prefix + ".bin", "wb") as f:
        for document in documents:
            f.write(np.asarray(document, dtype=dtype).tobytes())
    lengths = np.array([len(d) for d in documents], np.int32)
    pointers = np.zeros(len(documents), np.int64)
    if len(documents) > 1:
        pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64)) * np.dtype(dtype).itemsize
    document_index = np.arange(len(documents) + 1, dtype=np.int64)
    code = MEGATRON_DTYPE_CODES[dtype] if dtype_code is None else dtype_code
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(documents)))
        f.write(struct.pack("<Q", len(document_index)))
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(document_index.tobytes())


def write_llmc(path, tokens, version=1, magic=None, count=None):
    """llm.c: 256 int32 of header (magic, version, token count), then the tokens (version 1:
    uint16, GPT-2; version 7: uint32, Llama 3)."""
    header = np.zeros(256, np.int32)
    header[0] = magic if magic is not None else (20240520 if version == 1 else 20240801)
    header[1] = version
    header[2] = len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16 if version == 1 else np.uint32).tobytes())


def write_headerless(path, tokens, dtype=np.uint16):
    np.asarray(tokens, dtype=dtype).tofile(path)


def byte_documents(texts, end_of_text=256):
    """The byte tokenizer's documents: [eot, bytes..., eot] each."""
    return [[end_of_text, *text.encode("utf-8"), end_of_text] for text in texts]
