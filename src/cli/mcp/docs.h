/*
 * docs.h - parts of the documentation carried in the binary (so that an installed probing has
 * them), generated at build time by scripts/embed_docs.py into mcp_docs.c (src/cli/meson.build):
 * the MCP server's resources and prompts quote them.
 */
#ifndef PB_CLI_MCP_DOCS_H
#define PB_CLI_MCP_DOCS_H

/* docs/report.md from "## Method" to "## Findings": the four phases and the checks, and what
 * each phase uses and decides. */
extern const char pb_mcp_doc_method[];

/* docs/tables.md: every table, its columns and how each is measured. */
extern const char pb_mcp_doc_tables[];

#endif
