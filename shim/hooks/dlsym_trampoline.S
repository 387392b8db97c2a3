/* The exported dlsym (x86-64).
 *
 * glibc answers dlsym(RTLD_NEXT, ...) relative to the object that called dlsym, found from the return
 * address, and uses the caller for RTLD_DEFAULT (its namespace) and for auditors (LD_AUDIT symbind)
 * too. So every look-up the shim does not answer itself goes to the real dlsym with a plain jump:
 * the caller's return address stays on the stack and glibc sees the true caller. Only a look-up on a
 * real handle of a name the shim hooks goes to gpumem_dlsym_with_handle, which may substitute the
 * hook. (RTLD_DEFAULT and RTLD_NEXT never need that: they reach our own exported hook first, or the
 * object the caller really asked for.) */

#if defined(__x86_64__)

#ifdef __CET__
#define GPUMEM_BRANCH_TARGET endbr64
#else
#define GPUMEM_BRANCH_TARGET
#endif

/* Calls `function` with dlsym's two arguments (rdi, rsi) kept for the jump that follows, on a
 * 16-byte aligned stack as the ABI requires. */
        .macro CALL_KEEPING_ARGUMENTS function
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp
        .cfi_adjust_cfa_offset 8
        call    \function
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        .endm

        .text
        .globl  dlsym
        .type   dlsym, @function
        .p2align 4
dlsym:
        .cfi_startproc
        GPUMEM_BRANCH_TARGET
        cmpq    $-1, %rdi                /* RTLD_NEXT */
        je      .Lreal_dlsym
        testq   %rdi, %rdi               /* RTLD_DEFAULT */
        je      .Lreal_dlsym
        /* A real handle: is the name one we hook? */
        CALL_KEEPING_ARGUMENTS gpumem_dlsym_is_hooked_name
        testl   %eax, %eax
        jne     gpumem_dlsym_with_handle
.Lreal_dlsym:
        movq    gpumem_real_dlsym_pointer(%rip), %rax
        testq   %rax, %rax
        je      .Lresolve
        jmp     *%rax
.Lresolve:
        /* First call: resolve the real dlsym. */
        CALL_KEEPING_ARGUMENTS gpumem_resolve_real_dlsym
        testq   %rax, %rax
        je      .Lno_real_dlsym
        jmp     *%rax
.Lno_real_dlsym:
        ret                              /* rax is null: symbol not found */
        .cfi_endproc
        .size   dlsym, .-dlsym

        .hidden gpumem_dlsym_with_handle
        .hidden gpumem_dlsym_is_hooked_name
        .hidden gpumem_real_dlsym_pointer
        .hidden gpumem_resolve_real_dlsym

#else
#error "libgpumem's dlsym entry is written for x86-64 only"
#endif

        .section .note.GNU-stack,"",@progbits
