/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_syscall.h: the arm64 Linux system call convention, for the raw
 * system calls ../dbp/kh_dbp.c makes (kh_isa_syscall4(), ../kh_isa.h):
 * svc #0, the number in x8, the arguments and
 * the result in x0-x3.
 */

#ifndef KH_SYSCALL_H
#define	KH_SYSCALL_H

#define	KH_SYSCALL_TRAP	"svc #0"
#define	KH_SYSCALL_NR	"x8"
#define	KH_SYSCALL_A0	"x0"
#define	KH_SYSCALL_A1	"x1"
#define	KH_SYSCALL_A2	"x2"
#define	KH_SYSCALL_A3	"x3"

#endif
