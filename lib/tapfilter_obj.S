/* The compiled tc program (lib/tapfilter.bpf.o), built into the tools that
 * load it, so no file outside the binary decides what runs in the kernel. */
	.section .rodata
	.balign 8
	.global tapfilter_obj
	.global tapfilter_obj_end
tapfilter_obj:
	.incbin "lib/tapfilter.bpf.o"
tapfilter_obj_end:
	.section .note.GNU-stack,"",@progbits
