/*
 * hf_folder.h — where a Hugging Face model folder keeps its tokenizer. A plain folder
 * keeps tokenizer.json / vocab.txt at its root; a sentence-transformers folder keeps
 * them with its Transformer module (modules.json's path, "" for the root, or
 * 0_Transformer in layouts older than modules.json).
 */
#ifndef STOF_IO_HF_FOLDER_H
#define STOF_IO_HF_FOLDER_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IO_PATH_MAX 4096

/* The folder holding dir's tokenizer files into out (cap bytes): the Transformer
 * module's when modules.json names one, else 0_Transformer when dir has no tokenizer
 * files but that folder does, else dir. STOF_ERR_IO when dir is not a folder,
 * STOF_ERR_FORMAT when modules.json is malformed or its path leaves the folder. */
stof_status io_hf_tokenizer_dir(const char *dir, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* STOF_IO_HF_FOLDER_H */
