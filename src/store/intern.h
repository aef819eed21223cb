/*
 * intern.h - string interning: module names, class names and other repeated text become
 * 32-bit ids so that rows stay fixed-size.
 *
 * One process-wide table. Interning takes a mutex and may allocate, so callers do it once per
 * distinct string (when a module is first named), never per row. Looking up an id is lock-free
 * and safe from any thread: strings are never moved or freed while the table lives.
 * Id 0 is the empty string. When the table is full (PB_INTERN_MAX strings) pb_intern() returns
 * 0 and counts the miss.
 */
#ifndef PB_STORE_INTERN_H
#define PB_STORE_INTERN_H

#include <stddef.h>
#include <stdint.h>

#define PB_INTERN_MAX (1u << 22)

/* Returns the id of the string s[0..len) (copied, not borrowed), creating it if new.
 * [any thread] (takes a mutex; allocates on first sight of a string) */
uint32_t pb_intern(const char *s, size_t len);
uint32_t pb_intern_cstr(const char *s);

/* Returns the string for id, or "" for an unknown id. The pointer stays valid until
 * pb_intern_reset(). [any thread, lock-free] */
const char *pb_intern_get(uint32_t id);

/* Number of ids handed out, including id 0. */
uint32_t pb_intern_count(void);

/* Frees every string. Only when no reader or writer can be running (tests, detach). */
void pb_intern_reset(void);

#endif
